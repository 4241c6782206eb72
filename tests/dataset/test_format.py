"""The record layout: round trips, batch decoding, mismatches named by row and field."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from datarax.core.errors import RecordError
from datarax.dataset.format import (
    DatasetInfo,
    Features,
    Field,
    RecordMismatchError,
    ShardInfo,
    decode_records,
    encode_record,
    find_dataset,
    infer_features,
    read_metadata,
    write_metadata,
)


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def test_round_trip_every_encoding() -> None:
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(3)]
    records = [
        {"x": np.arange(6, dtype=np.int16).reshape(2, 3) + i, "y": float(i) / 2, "label": i,
         "text": f"héllo {i}", "ids": np.arange(i + 1, dtype=np.int32), "blob": bytes([i] * i),
         "png": _png(images[i]), "arr": images[i]}
        for i in range(3)
    ]
    features = infer_features(records[0], class_names={"label": ["a", "b", "c"]})
    assert [(f.name, f.encoding) for f in features.fields] == [
        ("x", "raw"), ("y", "raw"), ("label", "raw"), ("text", "utf8"), ("ids", "raw"),
        ("blob", "varlen"), ("png", "png"), ("arr", "raw")]
    # ids vary in length: declare them variable
    fields = list(features.fields)
    fields[4] = Field("ids", "int32", (None,), "varlen")
    fields[7] = Field("arr", "uint8", (4, 5, 3), "jpeg")
    features = Features(tuple(fields))
    out = decode_records(features, [encode_record(features, r, row=i) for i, r in enumerate(records)])
    assert out["x"].shape == (3, 2, 3) and out["x"].dtype == np.int16
    np.testing.assert_array_equal(out["x"][2], records[2]["x"])
    assert out["y"].dtype == np.float32 and out["y"].tolist() == [0.0, 0.5, 1.0]
    assert out["label"].tolist() == [0, 1, 2] and features["label"].class_names == ("a", "b", "c")
    assert list(out["text"]) == ["héllo 0", "héllo 1", "héllo 2"]
    assert [a.tolist() for a in out["ids"]] == [[0], [0, 1], [0, 1, 2]]
    assert [bytes(a) for a in out["blob"]] == [b"", b"\x01", b"\x02\x02"]
    np.testing.assert_array_equal(out["png"], np.stack(images))
    assert out["arr"].shape == (3, 4, 5, 3)  # jpeg: lossy, shape kept
    assert out["x"].ctypes.data % 64 == 0


def test_fixed_records_decode_as_one_block() -> None:
    features = Features((Field("image", "uint8", (2, 2, 3), "raw"), Field("label", "int32", (), "raw")))
    raws = [encode_record(features, {"image": np.full((2, 2, 3), i, np.uint8), "label": i})
            for i in range(5)]
    assert {len(r) for r in raws} == {features.head_size} == {16}
    out = decode_records(features, raws)
    assert out["image"][:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4]
    assert out["label"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(RecordError, match="record 1 of the batch has 15 bytes"):
        decode_records(features, [raws[0], raws[1][:-1]])


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"x": np.zeros(3, np.float64), "t": "a"}, "row 7, field 'x': dtype float64, the features say float32"),
        ({"x": np.zeros(4, np.float32), "t": "a"}, r"row 7, field 'x': shape \(4,\)"),
        ({"x": np.zeros(3, np.float32)}, "row 7, field 't': missing"),
        ({"x": np.zeros(3, np.float32), "t": "a", "z": 1}, "row 7: field 'z' is not in the features"),
        ({"x": np.zeros(3, np.float32), "t": b"\xff\xfe"}, "row 7, field 't': text is not valid UTF-8"),
        ({"x": np.zeros(3, np.float32), "t": "a", "n": 2**70},
         "row 7, field 'n': the integer 1180591620717411303424 does not fit the features' int64"),
    ],
)
def test_mismatch_names_row_and_field(record: dict, match: str) -> None:
    features = Features((Field("x", "float32", (3,), "raw"), Field("t", "str", (), "utf8"))
                        + ((Field("n", "int64", (), "raw"),) if "n" in record else ()))
    with pytest.raises(RecordMismatchError, match=match) as info:
        encode_record(features, record, row=7)
    assert info.value.row == 7


def test_undecodable_image_and_wrong_size() -> None:
    features = Features((Field("image", "uint8", (4, 4, 3), "png"),))
    with pytest.raises(RecordMismatchError, match="row 2, field 'image': undecodable image"):
        encode_record(features, {"image": b"\x89PNG\r\n\x1a\nbroken"}, row=2)
    with pytest.raises(RecordMismatchError, match="height x width 5x4, the features say 4x4"):
        encode_record(features, {"image": np.zeros((5, 4, 3), np.uint8)}, row=3)


def test_metadata_round_trip(tmp_path) -> None:
    features = Features((Field("label", "int64", (), "raw", ("cat", "dog")),))
    info = DatasetInfo(features, (ShardInfo("data-00000-of-00001.array_record", 3, 10, "ab"),),
                       ({"row": 1, "field": "label", "error": "x"},), {"source": "s"})
    write_metadata(tmp_path, info)
    assert read_metadata(tmp_path) == info
    assert find_dataset(str(tmp_path)) == str(tmp_path)
    assert find_dataset(str(tmp_path / "data-*.array_record")) == str(tmp_path)
    assert find_dataset(str(tmp_path.parent)) is None


def test_features_read_like_a_mapping_of_names() -> None:
    features = Features((Field("x", "float32", (3,), "raw"), Field("t", "str", (), "utf8")))
    assert list(features) == ["x", "t"] and len(features) == 2
    assert "t" in features and "y" not in features
    assert [features[name].encoding for name in features] == ["raw", "utf8"]
    with pytest.raises(KeyError, match=r"no field 'y'; the fields are \['x', 't'\]"):
        features["y"]


def test_numpy_float64_scalar_keeps_its_dtype_python_float_is_float32() -> None:
    features = infer_features({"a": np.float64(0.1), "b": 0.1, "c": np.float32(0.1)})
    assert [features[n].dtype for n in features] == ["float64", "float32", "float32"]


def test_an_ml_dtypes_value_names_the_exact_casts_a_field_can_hold() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    value = np.array([1.5, 2.0], ml_dtypes.bfloat16)
    with pytest.raises(RecordMismatchError) as inferred:
        infer_features({"w": value})
    assert str(inferred.value) == (
        "field 'w' is bfloat16 (an ml_dtypes type), which a dataset field cannot store: its "
        "dtype is a NumPy one. Store value.astype(np.float32) (exact) and cast it back in a "
        "stage, or value.view(np.uint16) to keep its bits "
        "(jax.lax.bitcast_convert_type(x, jnp.bfloat16) in a stage).")
    features = Features((Field("w", "float16", (2,), "raw"),))
    with pytest.raises(RecordMismatchError) as declared:
        encode_record(features, {"w": value}, row=3)
    assert str(declared.value).endswith(
        "dtype bfloat16, the features say float16 (cast the value: a field cannot be "
        "bfloat16, an ml_dtypes type).")
    exact = Features((Field("w", "float32", (2,), "raw"),))  # every bfloat16 is a float32
    assert decode_records(exact, [encode_record(exact, {"w": value})])["w"].tolist() == [[1.5, 2.0]]
