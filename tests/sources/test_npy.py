"""NpySource: memory-mapped .npy shards as a random-access host source (order, shards,
fields from several files, resume, the dtype rule and every bad-input message).

The conformance table (tests/conformance, row ``npy_shards``) runs it through every
contract check; here are its own behaviours."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import NpySource, NpySourceConfig, RandomAccessSource
from datarax.sources.epoch_order import EpochOrder
from datarax.testing import check_resume_exact


def save(folder, name, array):
    path = folder / name
    np.save(path, array)
    return str(path)


@pytest.fixture
def shards(tmp_path):
    """Rows 0..9 of a (10, 3) float32 table in shards of 4, 1 and 5 rows."""
    table = np.arange(30, dtype=np.float32).reshape(10, 3)
    return table, [save(tmp_path, f"s{k}.npy", table[lo:hi])
                   for k, (lo, hi) in enumerate(((0, 4), (4, 5), (5, 10)))]


def epoch_batches(source, batch_size, field="data"):
    pipeline = Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))
    return [np.asarray(b[field]) for b in pipeline]


def test_one_file_serves_its_rows_in_order(tmp_path):
    path = save(tmp_path, "x.npy", np.arange(7, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths=path, field="x"))
    assert isinstance(source, RandomAccessSource) and source.kind.name == "HOST"
    assert len(source) == 7 and source.paths == {"x": [path]}
    assert source.element_spec() == {"x": __import__("jax").ShapeDtypeStruct((), np.int32)}
    assert [b.tolist() for b in epoch_batches(source, 3, "x")] == [[0, 1, 2], [3, 4, 5], [6]]
    source.close()


def test_shards_are_numbered_across_files_and_shuffled_per_epoch(shards):
    table, paths = shards
    source = NpySource(NpySourceConfig(paths=paths))
    assert len(source) == 10 and source.element_spec()["data"].shape == (3,)
    np.testing.assert_array_equal(np.concatenate(epoch_batches(source, 4)), table)
    source.close()

    shuffled = NpySource(NpySourceConfig(paths=paths, shuffle=True, seed=5))
    for epoch in range(2):
        rows = np.concatenate(epoch_batches(shuffled, 4))
        order = EpochOrder(10, 5, epoch).indices(0, 10)  # the documented seed + epoch order
        np.testing.assert_array_equal(rows, table[order])
    assert EpochOrder(10, 5, 0).indices(0, 10).tolist() != EpochOrder(10, 5, 1).indices(0, 10).tolist()
    shuffled.close()


def test_a_mapping_makes_one_field_per_entry_aligned_by_record(tmp_path):
    image = np.arange(8 * 2 * 2, dtype=np.uint8).reshape(8, 2, 2)
    label = (np.arange(8) % 3).astype(np.int64)  # int64 labels: narrowed to int32
    config = NpySourceConfig(
        paths={"image": [save(tmp_path, "i0.npy", image[:3]), save(tmp_path, "i1.npy", image[3:])],
               "label": save(tmp_path, "label.npy", label)},
        shuffle=True, seed=2,
    )
    assert config.fields() == {"image": (str(tmp_path / "i0.npy"), str(tmp_path / "i1.npy")),
                               "label": (str(tmp_path / "label.npy"),)}
    source = NpySource(config)
    spec = source.element_spec()
    assert (spec["image"].shape, spec["image"].dtype, spec["label"].dtype) == ((2, 2), np.uint8, np.int32)
    pipeline = Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0))
    batches = list(pipeline)
    images = np.concatenate([np.asarray(b["image"]) for b in batches])
    labels = np.concatenate([np.asarray(b["label"]) for b in batches])
    ids = images[:, 0, 0] // 4  # record i's image starts with 4 * i
    assert sorted(ids.tolist()) == list(range(8))
    assert labels.dtype == np.int32 and labels.tolist() == (ids % 3).tolist()
    source.close()


def test_a_local_glob_pattern_is_expanded_sorted_as_a_urls_is(tmp_path):
    for k in (2, 0, 1):  # written out of order: the pattern's files are taken sorted
        save(tmp_path, f"image-{k}.npy", np.full((3, 2), k, np.int32))
        save(tmp_path, f"label-{k}.npy", np.arange(3 * k, 3 * k + 3, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths={"image": str(tmp_path / "image-*.npy"),
                                              "label": str(tmp_path / "label-*.npy")}))
    assert source.paths["label"] == [str(tmp_path / f"label-{k}.npy") for k in range(3)]
    batch = source.get_batch(9)
    assert np.asarray(batch["label"]).tolist() == list(range(9))
    assert np.asarray(batch["image"])[:, 0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    source.close()
    with pytest.raises(RecordError, match=r"^NpySource: field 'data': the glob pattern "
                                          r"'.*absent-\*\.npy' matches no files"):
        NpySource(NpySourceConfig(paths=str(tmp_path / "absent-*.npy")))



def test_a_double_star_pattern_takes_the_shards_of_every_folder_below(tmp_path):
    for name, values in (("label-0.npy", [0, 1]), ("a/label-1.npy", [2]), ("a/b/label-2.npy", [3])):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp_path / name, np.asarray(values, np.int32))
    source = NpySource(NpySourceConfig(paths=str(tmp_path / "**" / "label-*.npy")))
    assert [p.rsplit("/", 1)[1] for p in source.paths["data"]] == [
        "label-2.npy", "label-1.npy", "label-0.npy"]  # sorted by path: a/b/, a/, then top
    assert np.asarray(source.get_batch(4)["data"]).tolist() == [3, 2, 0, 1]
    source.close()


def test_a_glob_of_unpadded_numbers_beside_a_field_laid_out_otherwise_is_refused(tmp_path):
    # image-10.npy sorts before image-2.npy: records would be numbered 0, 1, 10, 11, 2 ...
    # by file, and the labels of one file would sit beside the wrong images
    for k in range(12):
        save(tmp_path, f"image-{k}.npy", np.full((1, 2), k, np.int32))
        save(tmp_path, f"tag-{k}.npy", np.full(1, k, np.int32))
    labels = save(tmp_path, "labels.npy", np.arange(12, dtype=np.int32))
    pattern = str(tmp_path / "image-*.npy")
    with pytest.raises(ConfigError) as err:
        NpySource(NpySourceConfig(paths={"image": pattern, "label": labels}))
    assert str(err.value) == (
        f"NpySource: field 'image': the glob pattern '{pattern}' matches files numbered "
        "without zero padding, taken in sorted name order ('image-10.npy' before "
        "'image-2.npy'), while field 'label' is laid out otherwise, so its records would "
        "not line up with them. Zero-pad the numbers in the file names (image-02.npy), or "
        "list the files in order."
    )
    # fields whose files are numbered alike line up, and one field alone is only an order
    tags = str(tmp_path / "tag-*.npy")
    source = NpySource(NpySourceConfig(paths={"image": pattern, "tag": tags}))
    batch = source.get_batch(12)
    assert np.asarray(batch["image"])[:, 0].tolist() == np.asarray(batch["tag"]).tolist()
    source.close()
    NpySource(NpySourceConfig(paths=pattern)).close()


def test_shards_split_between_processes_and_resume_exactly(shards):
    table, paths = shards

    def make():
        source = NpySource(NpySourceConfig(paths=paths, shuffle=True, seed=1), num_threads=2)
        return Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0))

    report = check_resume_exact(make, interrupt_points=[1, 2, 4, 5], num_epochs=2)
    assert report.num_records == 20
    halves = []
    for index in range(2):
        source = NpySource(NpySourceConfig(paths=paths, shuffle=True, seed=1))
        pipeline = Pipeline(source=source, stages=[], batch_size=2, shard_index=index, shard_count=2)
        halves.append([row[0] // 3 for b in pipeline for row in np.asarray(b["data"]).tolist()])
        source.close()
    assert len(halves[0]) == len(halves[1]) == 5
    assert sorted(halves[0] + halves[1]) == list(range(10))


def test_direct_iteration_makes_num_epochs_passes(tmp_path):
    path = save(tmp_path, "x.npy", np.arange(3, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths=path, num_epochs=2))
    assert [int(r["data"]) for r in source] == [0, 1, 2, 0, 1, 2]
    source.close()


# ------------------------------------------------------------------ dtypes
def test_int64_records_are_narrowed_or_refused_naming_file_record_and_value(tmp_path):
    ok = save(tmp_path, "ok.npy", np.arange(4, dtype=np.int64))
    big = save(tmp_path, "big.npy", np.asarray([7, 2**40, 9], np.int64))
    source = NpySource(NpySourceConfig(paths=[ok, big]))
    assert source.element_spec()["data"].dtype == np.int32
    with pytest.raises(RecordError) as err:
        epoch_batches(source, 8)
    assert str(err.value) == (
        f"NpySource: cannot read record 1 of file '{big}' (epoch 0): field "
        "'data' is int64 and holds 1099511627776, outside the int32 range, so it cannot be "
        "cast to int32 without loss while jax_enable_x64 is off. Enable x64 with "
        "jax.config.update('jax_enable_x64', True), or save the shards as int32. The record is "
        "otherwise readable: do as above, or construct the source with on_error='skip' to "
        "drop such records (they are counted and reported)."
    )
    assert (err.value.path, err.value.index) == (big, 1)
    source.close()

    skipping = NpySource(NpySourceConfig(paths=[ok, big], on_error="skip"))
    assert np.concatenate(epoch_batches(skipping, 4)).tolist() == [0, 1, 2, 3, 7, 9]
    [skipped] = skipping.skipped_records()
    assert (skipped.path, skipped.index_in_file, skipped.index) == (big, 1, 5)
    skipping.close()


def test_an_int64_value_past_int32_is_named_in_its_own_fields_file(tmp_path):
    # the failing value lives in 'label' (second field, two shards), not in 'x''s file
    x = save(tmp_path, "x.npy", np.zeros((6, 2), np.float32))
    labels = np.arange(6)
    labels[4] = 2**40
    shards = [save(tmp_path, "l0.npy", labels[:3]), save(tmp_path, "l1.npy", labels[3:])]
    source = NpySource(NpySourceConfig(paths={"x": x, "label": shards}))
    with pytest.raises(RecordError) as err:
        epoch_batches(source, 6, field="label")
    assert str(err.value).startswith(
        f"NpySource: cannot read record 1 of file '{shards[1]}' (epoch 0): field 'label' is "
        "int64 and holds 1099511627776, outside the int32 range")
    assert (err.value.path, err.value.index) == (shards[1], 1)
    source.close()
    skipping = NpySource(NpySourceConfig(paths={"x": x, "label": shards}, on_error="skip"))
    assert np.concatenate(epoch_batches(skipping, 3, field="label")).tolist() == [0, 1, 2, 3, 5]
    [skipped] = skipping.skipped_records()
    assert (skipped.path, skipped.index_in_file, skipped.index) == (shards[1], 1, 4)
    skipping.close()


def test_float64_is_refused_unless_cast_float64(tmp_path):
    path = save(tmp_path, "f.npy", np.linspace(0, 1, 4))
    with pytest.raises(ConfigError) as err:
        NpySource(NpySourceConfig(paths=path, field="score"))
    assert str(err.value) == (
        f"NpySource file '{path}': field 'score' is float64 but jax_enable_x64 is off, and "
        "datarax never narrows silently. Set cast_float64=True in the config to cast it to "
        "float32, enable x64 with jax.config.update('jax_enable_x64', True), or save the "
        "shards as float32."
    )
    source = NpySource(NpySourceConfig(paths=path, field="score", cast_float64=True))
    [batch] = epoch_batches(source, 4, "score")
    assert batch.dtype == np.float32 and batch.tolist() == np.linspace(0, 1, 4).astype(np.float32).tolist()
    source.close()


# --------------------------------------------------------------- bad input
def test_missing_and_unreadable_files_are_named(tmp_path):
    missing = str(tmp_path / "nope.npy")
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=missing))
    assert str(err.value) == (
        f"NpySource: field 'data': the file '{missing}' does not exist. Check the path (a glob "
        "pattern such as 'data-*.npy' is expanded).")
    assert err.value.path == missing
    with pytest.raises(RecordError, match=rf"^NpySource: field 'data': the path '{tmp_path}' "
                                          "is a directory, not a file. Name its files, or a "
                                          "glob pattern"):
        NpySource(NpySourceConfig(paths=str(tmp_path)))
    text = tmp_path / "notes.npy"
    text.write_text("not an array")
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=str(text)))
    assert str(err.value) == (
        f"NpySource: '{text}' is not a readable .npy file (it does not start with the .npy "
        "header that numpy.save writes). Write each shard with numpy.save (one array per "
        "file, no object dtype).")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(RecordError, match=r"\(it holds Python objects \(dtype object\), which "
                                          r"cannot be memory-mapped\)\. Write each shard"):
        NpySource(NpySourceConfig(paths=str(objects)))
    short = tmp_path / "short.npy"
    np.save(short, np.arange(20, dtype=np.int32))
    short.write_bytes(short.read_bytes()[:-20])
    with pytest.raises(RecordError, match=r"\(its header says \(20,\) int32, 80 bytes, but 60 "
                                          r"follow: cut short\?\)"):
        NpySource(NpySourceConfig(paths=str(short)))
    scalar = save(tmp_path, "scalar.npy", np.int32(3))
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=scalar))
    assert str(err.value) == (
        f"NpySource: '{scalar}' holds a single value (shape ()); records lie along axis 0, so "
        "a shard needs at least one dimension."
    )



def test_an_npz_archive_or_a_structured_array_is_refused_naming_the_file(tmp_path):
    archive = str(tmp_path / "pair.npz")
    np.savez(archive, a=np.arange(3), b=np.arange(3))
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=archive))
    assert str(err.value) == (
        f"NpySource: '{archive}' is an .npz archive (arrays ['a', 'b']), not a .npy file. Save "
        "each array with numpy.save and pass paths={field: file}."
    )
    table = save(tmp_path, "table.npy", np.zeros(3, dtype=[("a", np.int32), ("b", np.float32)]))
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=table))
    assert str(err.value).startswith(f"NpySource: '{table}' holds a structured dtype (")
    assert err.value.path == table


def test_a_bfloat16_array_saved_with_numpy_save_is_refused_saying_what_to_save(tmp_path):
    import ml_dtypes

    path = save(tmp_path, "bf16.npy", np.arange(4, dtype=ml_dtypes.bfloat16))  # read as |V2
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=path))
    assert str(err.value) == (
        f"NpySource: '{path}' holds raw bytes (|V2), which a batch cannot carry. "
        "Raw values of 2 bytes with no fields are most likely an ml_dtypes array (bfloat16 "
        "is |V2, float8 |V1) that numpy.save wrote as bytes: .npy cannot name its type. Save "
        "numpy.save(path, x.view(np.uint16)) (np.uint8 for float8) and turn the field back in "
        "a stage with jax.lax.bitcast_convert_type(value, jnp.bfloat16), or save "
        "x.astype(np.float32) (exact for bfloat16).")
    assert err.value.path == path

def test_shards_that_disagree_are_refused_naming_the_file(tmp_path):
    first = save(tmp_path, "a.npy", np.zeros((4, 3), np.float32))
    wide = save(tmp_path, "b.npy", np.zeros((2, 5), np.float32))
    ints = save(tmp_path, "c.npy", np.zeros((2, 3), np.int32))
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths=[first, wide], field="x"))
    assert str(err.value) == (
        f"NpySource: field 'x': '{wide}' holds records of float32(5,), but '{first}' holds "
        "float32(3,); every shard of a field must have the same per-record shape and dtype."
    )
    assert err.value.path == wide
    with pytest.raises(RecordError, match=rf"'{ints}' holds records of int32\(3,\), but"):
        NpySource(NpySourceConfig(paths=[first, ints]))
    short = save(tmp_path, "short.npy", np.zeros(3, np.int32))
    again = save(tmp_path, "again.npy", np.zeros((4, 3), np.float32))
    with pytest.raises(RecordError) as err:
        NpySource(NpySourceConfig(paths={"x": [first, again], "y": short}))
    assert str(err.value) == (
        f"NpySource: the fields hold different numbers of records: 'x' 8 ({first}, {again}), "
        f"'y' 3 ({short}); every field needs exactly one value per record."
    )
    empty = save(tmp_path, "empty.npy", np.zeros((0, 2), np.float32))
    with pytest.raises(RecordError, match=rf"^NpySource: the files \['{empty}'\] hold no records\.$"):
        NpySource(NpySourceConfig(paths=empty))


def test_text_shards_of_different_widths_and_byte_orders_serve_every_value(tmp_path):
    # numpy.save gives each shard of strings its own width (<U3, <U5), and a shard
    # saved big-endian holds the same int32 values: neither is a different record type.
    cats = save(tmp_path, "t0.npy", np.array(["cat", "dog"]))
    longer = save(tmp_path, "t1.npy", np.array(["zebra"]))
    little = save(tmp_path, "i0.npy", np.array([1, 2], "<i4"))
    big = save(tmp_path, "i1.npy", np.array([3], ">i4"))
    source = NpySource(NpySourceConfig(paths={"name": [cats, longer], "id": [little, big]}))
    batch = next(iter(Pipeline(source=source, stages=[], batch_size=3)))
    assert list(batch["name"]) == ["cat", "dog", "zebra"]
    assert np.asarray(batch["id"]).tolist() == [1, 2, 3]
    assert np.asarray(batch["id"]).dtype == np.int32
    source.close()
    ints = save(tmp_path, "i2.npy", np.array([4], "<i2"))
    with pytest.raises(RecordError, match=rf"'{ints}' holds records of int16\(\), but '{little}' "
                                          r"holds int32\(\)"):
        NpySource(NpySourceConfig(paths=[little, ints]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "NpySourceConfig.paths is empty; name a .npy file, a list of shards or a mapping "
             "{field: files}."),
        ({"paths": 3}, "NpySourceConfig.paths must be a path, a glob pattern or a list of them "
                       "(str or os.PathLike), got int 3."),
        ({"paths": ["a.npy", None]}, "NpySourceConfig.paths must be a path, a glob pattern or a "
                                     "list of them (str or os.PathLike), got NoneType None."),
        ({"paths": {}}, "NpySourceConfig.paths is an empty mapping; name at least one field."),
        ({"paths": {"x": []}}, "NpySourceConfig.paths['x'] is an empty list; name at least one "
                               "file."),
        ({"paths": {"x": "a.npy"}, "field": "y"},
         "NpySourceConfig: with a mapping of paths the field names are its keys; leave field "
         "unset (got field='y')."),
        ({"paths": "a.npy", "field": ""}, "NpySourceConfig.field must be a non-empty str or "
                                          "None, got ''."),
        ({"paths": "a.npy", "seed": -1}, "NpySourceConfig.seed must be >= 0, got -1."),
        ({"paths": "a.npy", "shuffle": 1}, "NpySourceConfig.shuffle must be a bool (True/False), "
                                           "got int 1."),
        ({"paths": "a.npy", "num_epochs": 0}, "NpySourceConfig.num_epochs must be >= 1 (or -1 "
                                              "for passes without end), got 0."),
    ],
)
def test_config_fields_are_checked(kwargs, message):
    with pytest.raises(ConfigError) as err:
        NpySourceConfig(**kwargs)
    assert str(err.value) == message


def test_config_is_normalized_hashable_and_replaceable(tmp_path):
    a = NpySourceConfig(paths=["x.npy", tmp_path / "y.npy"])
    assert a.paths == ("x.npy", str(tmp_path / "y.npy")) and a.fields() == {"data": a.paths}
    assert hash(a) == hash(NpySourceConfig(paths=("x.npy", str(tmp_path / "y.npy"))))
    b = NpySourceConfig(paths={"x": "x.npy"})
    assert b.replace(seed=3).paths == (("x", ("x.npy",)),)
    with pytest.raises(ConfigError, match=r"^NpySource needs an NpySourceConfig, got dict "
                       r"\{'paths': 'x.npy'\}; its files go in the config. Call "
                       r"NpySource\(NpySourceConfig\(paths='data.npy'\)\).$"):
        NpySource({"paths": "x.npy"})


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_file_written_over_in_place_stops_the_read_naming_it(tmp_path, on_error):
    """A memory-mapped file cut short by an in-place rewrite would kill the process
    (SIGBUS): the read is refused instead, under every on_error policy (no record is
    skipped for it)."""
    from datarax.core.errors import SourceChangedError

    path = save(tmp_path, "x.npy", np.arange(1000, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths=path, field="x", on_error=on_error))
    # rewritten before any read (a rewrite racing the read-ahead threads' reads could
    # still meet a map past the file's new end: the test must not)
    np.save(path, np.full(5, 9, np.int32))  # the same file, rewritten and shorter
    pipeline = Pipeline(source=source, stages=[], batch_size=10, rngs=nnx.Rngs(0))
    with pytest.raises(SourceChangedError, match=r"'.*x\.npy' was written over while the "
                       r"source reads it .*os\.replace\(\)") as caught:
        next(iter(pipeline))
    assert caught.value.path == path
    source.close()


def test_a_file_replaced_by_rename_keeps_serving_the_version_opened(tmp_path):
    path = save(tmp_path, "x.npy", np.arange(100, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths=path, field="x"))
    assert source.get_batch(3)["x"].tolist() == [0, 1, 2]
    np.save(tmp_path / "new.npy", np.full(7, 9, np.int32))
    __import__("os").replace(tmp_path / "new.npy", path)
    assert source.get_batch(3)["x"].tolist() == [3, 4, 5]
    source.close()


def test_a_float64_value_past_float32_names_float32_as_the_type_to_save(tmp_path):
    path = save(tmp_path, "f.npy", np.asarray([0.5, 1e300, 2.0]))
    source = NpySource(NpySourceConfig(paths=path, cast_float64=True))
    with pytest.raises(RecordError) as err:
        epoch_batches(source, 3)
    assert str(err.value).startswith(
        f"NpySource: cannot read record 1 of file '{path}' (epoch 0): field 'data' is float64 "
        "and holds 1e+300, beyond the float32 range, so casting it to float32 would make it "
        "inf. Enable x64 with jax.config.update('jax_enable_x64', True), scale the values, or "
        "save the shards as float32. The record is otherwise readable")
    source.close()


@pytest.mark.parametrize("read_before", [False, True])
def test_every_read_after_close_is_refused_as_array_record_refuses_it(tmp_path, read_before):
    # before: a source closed before its first read built a fresh reader and read on,
    # and source[i] read on after close either way
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths={"x": str(tmp_path / "x.npy")}))
    if read_before:
        assert source.get_batch(2)["x"].tolist() == [0, 1]
    source.close()
    for read in (lambda: source[1], lambda: source.get_batch(2), lambda: next(iter(source))):
        with pytest.raises(RuntimeError, match="NpySource is closed; build a new source"):
            read()
    source.close()  # twice is fine
