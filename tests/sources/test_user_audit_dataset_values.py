"""A dataset written with ``write_dataset`` reads back the values it was given: a value
that its field's dtype (inferred from the first record) cannot hold exactly is refused
naming the row and field, never stored changed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("array_record.python.array_record_module")

from datarax.dataset import ConversionError, write_dataset  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402


@pytest.mark.parametrize(
    ("first", "later", "dtype", "keep"),
    [
        (True, 2, "bool", ""),  # 2 would have been stored as True
        (False, -1, "bool", ""),
        (1.5, 1e300, "float32", "float64"),  # 1e300 would have been stored as inf
        (np.uint8(1), 256, "uint8", "uint64"),
        (np.int8(1), -129, "int8", "int64"),
    ],
)
def test_a_value_its_field_cannot_hold_is_refused(tmp_path, first, later, dtype, keep):
    with pytest.raises(ConversionError) as err:
        write_dataset([{"x": first}, {"x": later}], str(tmp_path / "ds"))
    wider = f" (declare the field {keep} in features= to keep them)" if keep else ""
    assert f"row 1, field 'x': values do not fit {dtype}{wider}." in str(err.value)


def test_values_that_fit_read_back_exactly(tmp_path):
    rows = [{"flag": True, "score": 1.5, "small": np.uint8(7)},
            {"flag": 0, "score": -3.0e38, "small": 255},
            {"flag": 1, "score": float("inf"), "small": 0}]
    write_dataset(rows, str(tmp_path / "ds"))
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"))
    try:
        batch = source.get_batch(3)
    finally:
        source.close()
    assert batch["flag"].dtype == np.bool_ and batch["flag"].tolist() == [True, False, True]
    assert batch["score"].dtype == np.float32
    assert batch["score"].tolist() == [1.5, float(np.float32(-3.0e38)), float("inf")]
    assert batch["small"].dtype == np.uint8 and batch["small"].tolist() == [7, 255, 0]


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_source_part_way_through_a_pass_is_written_whole(tmp_path, shuffle):
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    def build():
        return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=3, num_epochs=-1),
                            {"x": np.arange(10, dtype=np.int32)})

    fresh = build()
    write_dataset(fresh, str(tmp_path / "fresh"))
    used = build()
    with iter(Pipeline(source=used, stages=[], batch_size=3)) as it:
        next(it)  # 3 records of the pass handed out
    write_dataset(used, str(tmp_path / "used"))  # was: the pass's last 7, then 3 of the next
    written = []
    for name in ("fresh", "used"):
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / name))
        written.append(source.get_batch(10)["x"].tolist())
        source.close()
    assert written[1] == written[0]
    assert sorted(written[1]) == list(range(10))


def _png(array: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _read_images(folder) -> list:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(folder))
    try:
        return np.asarray(source.get_batch(len(source))["image"])[:, 0, 0].tolist()
    finally:
        source.close()


def test_an_image_that_would_lose_colour_or_transparency_is_refused(tmp_path):
    pytest.importorskip("PIL")
    grey = np.full((4, 4), 77, np.uint8)
    colour = np.dstack([grey, grey + 1, grey + 2])
    see_through = np.dstack([colour, np.full((4, 4), 5, np.uint8)])
    with pytest.raises(ConversionError) as err:  # was stored grey: [[77], [78]]
        write_dataset([{"image": _png(grey)}, {"image": _png(colour)}], str(tmp_path / "a"))
    assert ("row 1, field 'image': an RGB image, the features say 1 channel(s); storing it so "
            "would lose its colours. Declare the field with 3 channels (features=), or convert "
            "such images first (PIL: image.convert('L'); the field's channels are those of the "
            "first image).") in str(err.value)
    with pytest.raises(ConversionError, match="would lose its transparency"):
        write_dataset([{"image": _png(colour)}, {"image": _png(see_through)}], str(tmp_path / "b"))
    # nothing lost: grey into colour, an opaque alpha dropped, a grey RGB image into grey
    opaque = np.dstack([colour, np.full((4, 4), 255, np.uint8)])
    write_dataset([{"image": _png(colour)}, {"image": _png(grey)}, {"image": _png(opaque)}],
                  str(tmp_path / "c"))
    assert _read_images(tmp_path / "c") == [[77, 78, 79], [77, 77, 77], [77, 78, 79]]
    write_dataset([{"image": _png(grey)}, {"image": _png(np.dstack([grey] * 3))}], str(tmp_path / "d"))
    assert _read_images(tmp_path / "d") == [[77], [77]]


def test_an_image_folder_whose_first_image_is_grey_keeps_the_colour_of_the_rest(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    from datarax.dataset import convert

    for name in ("cat", "dog"):
        (tmp_path / "images" / name).mkdir(parents=True)
    Image.fromarray(np.full((4, 4), 50, np.uint8)).save(tmp_path / "images" / "cat" / "a.png")
    colour = np.dstack([np.full((4, 4), v, np.uint8) for v in (10, 20, 30)])
    Image.fromarray(colour).save(tmp_path / "images" / "cat" / "b.png")
    Image.fromarray(colour + 1).save(tmp_path / "images" / "dog" / "c.png")
    info, _ = convert(str(tmp_path / "images"), str(tmp_path / "out"))
    assert info.features["image"].shape == (4, 4, 3)  # was (4, 4, 1): every image stored grey
    assert _read_images(tmp_path / "out") == [[50, 50, 50], [10, 20, 30], [11, 21, 31]]


def test_a_64bit_value_read_back_names_fixes_a_dataset_reader_has(tmp_path):
    # no decode of the user's and no exclude_keys: the fixes are x64 or the written field
    from datarax.core.errors import ConfigError, RecordError

    write_dataset([{"id": np.int64(7)}, {"id": np.int64(2**40)}], str(tmp_path / "ids"))
    write_dataset([{"w": np.float64(0.5)}], str(tmp_path / "weights"))
    ids = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ids"))
    try:
        with pytest.raises(RecordError) as wide:
            ids.get_batch(2)
    finally:
        ids.close()
    assert ("field 'id' is int64 and holds 1099511627776, outside the int32 range, so it cannot "
            "be cast to int32 without loss while jax_enable_x64 is off. Enable x64 with "
            "jax.config.update('jax_enable_x64', True), or rewrite the dataset with the field "
            "as 32 bits (where its values fit) or without it.") in str(wide.value)
    weights = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "weights"))
    try:
        with pytest.raises(ConfigError) as refused:
            weights.element_spec()
    finally:
        weights.close()
    assert str(refused.value).endswith(
        "field 'w' is float64 but jax_enable_x64 is off, and datarax never narrows silently. Set "
        "cast_float64=True in the config to cast it to float32, enable x64 with "
        "jax.config.update('jax_enable_x64', True), or rewrite the dataset with the field as "
        "32 bits (where its values fit) or without it.")


def test_a_label_past_int32_read_with_decode_images_names_the_same_fixes(tmp_path):
    import datarax
    from PIL import Image

    from datarax.core.errors import RecordError

    rows = [{"image": Image.fromarray(np.full((8, 8, 3), i, np.uint8)),
             "label": np.int64(2**40 if i == 1 else i)} for i in range(2)]
    write_dataset(rows, str(tmp_path / "ds"))
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"),
                                     decode=datarax.decode_images("image", resize=8, crop=8))
    try:
        with pytest.raises(RecordError) as err:
            source.get_batch(2)
    finally:
        source.close()
    assert ("field 'label' is int64 and holds 1099511627776, outside the int32 range, so it "
            "cannot be cast to int32 without loss while jax_enable_x64 is off. Enable x64 with "
            "jax.config.update('jax_enable_x64', True), or rewrite the dataset with the field "
            "as 32 bits (where its values fit) or without it.") in str(err.value)
