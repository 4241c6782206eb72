"""MemorySource: both data forms, shuffle, metadata, state, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from grain.experimental import index_shuffle as grain_index_shuffle

from datarax.core.errors import ConfigError, DataraxError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def test_defaults():
    config = MemorySourceConfig()
    assert (config.shuffle, config.seed, config.track_metadata, config.num_epochs) == (False, 42, False, 1)
    assert config.cast_float64 is False


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shuffle": 1}, "MemorySourceConfig.shuffle must be a bool"),
        ({"seed": -1}, "MemorySourceConfig.seed must be >= 0, got -1"),
        ({"seed": 2**32}, "MemorySourceConfig.seed must be < 2\\*\\*32"),
        ({"seed": "1"}, "MemorySourceConfig.seed must be an int, got str"),
        ({"track_metadata": None}, "MemorySourceConfig.track_metadata must be a bool"),
        ({"num_epochs": 0}, "MemorySourceConfig.num_epochs must be >= 1 \\(or -1 for passes without end\\), got 0"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MemorySourceConfig(**kwargs)


def test_dict_and_list_forms_hold_the_same_records():
    images = np.arange(5 * 4, dtype=np.uint8).reshape(5, 2, 2)
    labels = np.arange(5, dtype=np.int32)
    from_dict = MemorySource(MemorySourceConfig(), {"image": images, "label": labels})
    from_list = MemorySource(
        MemorySourceConfig(), [{"image": images[i], "label": int(labels[i])} for i in range(5)]
    )
    for source in (from_dict, from_list):
        assert len(source) == 5
        batch = source.get_batch_at(3, 4)  # wraps into the next epoch
        np.testing.assert_array_equal(np.asarray(batch["image"]), images[[3, 4, 0, 1]])
        assert batch["label"].dtype == jnp.int32
        spec = source.element_spec()
        assert spec["image"].shape == (2, 2) and spec["image"].dtype == np.uint8


def test_python_numbers_become_32_bit():
    source = MemorySource(MemorySourceConfig(), [{"i": 1, "f": 0.5} for _ in range(3)])
    assert source.data["i"].dtype == jnp.int32 and source.data["f"].dtype == jnp.float32


def test_sixty_four_bit_ints_that_fit_are_narrowed_to_int32():
    source = MemorySource(MemorySourceConfig(), {"y": np.arange(5), "u": np.arange(5, dtype=np.uint64)})
    assert source.data["y"].dtype == jnp.int32 and source.data["y"].tolist() == [0, 1, 2, 3, 4]
    assert source.data["u"].dtype == jnp.int32 and source.data["u"].tolist() == [0, 1, 2, 3, 4]
    records = MemorySource(MemorySourceConfig(), [{"y": np.int64(i)} for i in range(3)])
    assert records.data["y"].dtype == jnp.int32 and records.data["y"].tolist() == [0, 1, 2]


def test_a_sixty_four_bit_int_that_does_not_fit_is_refused_naming_field_record_and_value():
    with pytest.raises(RecordError) as err:
        MemorySource(MemorySourceConfig(), {"meta": {"id": np.array([1, 2, 2**40])}})
    assert str(err.value) == (
        "MemorySource: field 'meta/id' is int64 and record 2 holds 1099511627776, outside the "
        "int32 range, so it cannot be cast to int32 without loss while jax_enable_x64 is off. "
        "Enable x64 with jax.config.update('jax_enable_x64', True), or remove the field from data."
    )
    assert err.value.index == 2
    with pytest.raises(RecordError, match="field 'n' is int64 and record 1 holds -4294967296"):
        MemorySource(MemorySourceConfig(), [{"n": 1}, {"n": -(2**32)}])


def test_float64_is_refused_unless_cast_float64():
    message = (
        "MemorySource: field 'x' is float64 but jax_enable_x64 is off, and datarax never "
        "narrows silently. Set cast_float64=True in the config to cast it to float32, enable "
        "x64 with jax.config.update('jax_enable_x64', True), or remove the field from data."
    )
    for data in ({"x": np.zeros(2)}, [{"x": np.float64(0.5)} for _ in range(2)]):
        with pytest.raises(ConfigError) as err:
            MemorySource(MemorySourceConfig(), data)
        assert str(err.value) == message
    source = MemorySource(MemorySourceConfig(cast_float64=True), {"x": np.array([0.5, 1.5])})
    assert source.data["x"].dtype == jnp.float32 and source.data["x"].tolist() == [0.5, 1.5]
    with pytest.raises(ConfigError, match="MemorySourceConfig.cast_float64 must be a bool"):
        MemorySourceConfig(cast_float64=1)


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, "empty dict"),
        ([], "empty sequence"),
        ([1, 2], "records must be dicts of fields, record 0 is int"),
        ([{"a": 1}, {"b": 2}], "record 1 has fields \\['b'\\], record 0 has \\['a'\\]"),
        ({"a": np.zeros(3, np.float32), "b": np.zeros(4, np.float32)}, "different numbers of records"),
        ([{"a": np.zeros(2)}, {"a": np.zeros(3)}], "field 'a': record 1 has shape \\(3,\\), record 0 has \\(2,\\)"),
        ({"a": np.float32(1)}, "field 'a' is a scalar"),
        ({"t": np.array([1, "y"], dtype=object)}, "field 't' is an object array holding int values \\(1\\)"),
        ({"t": ["a", 2]}, "field 't' mixes text with int values \\(2\\)"),
        ({"t": np.array([None, None])}, "field 't' is an object array holding NoneType"),
        ({"t": "abc"}, "field 't' is a single string"),
        ({"m": {}}, "field 'm' is an empty dict"),
        ([{"m": {"a": 1}}, {"m": {"b": 1}}], "record 1 field 'm' has fields \\['b'\\], record 0 has \\['a'\\]"),
        ([{"m": {"a": 1}}, {"m": 2}], "record 1 field 'm' has fields int, record 0 has \\['a'\\]"),
        ([{"m": 1}, {"m": {"a": 1}}], "field 'm': record 1 has a dict, record 0 has shape \\(\\)"),
        ({"c": np.array([np.datetime64("2020-01-01")] * 2)}, "field 'c' holds datetime64\\[D\\] values"),
        ("abc", "must be a dict of arrays or a sequence of records, got str"),
        ({"a": np.zeros((0, 2), np.float32)}, "holds no records"),
        ([{"a": jnp.ones(2)}, {"a": np.ones(2, np.int32)}],
         "field 'a': record 1 is int32, record 0 is float32, which NumPy stacks as float64, a "
         "dtype no record has"),
    ],
)
def test_bad_data_is_refused_with_a_clear_error(data, message):
    with pytest.raises(DataraxError, match=message):
        MemorySource(MemorySourceConfig(), data)


def test_a_hugging_face_dataset_is_refused_naming_its_columns_as_the_data():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"label": [3, 1, 2], "word": ["a", "b", "c"]})
    with pytest.raises(DataraxError) as err:
        MemorySource(MemorySourceConfig(), ds)
    assert str(err.value) == (
        "MemorySource data must be a dict of arrays or a sequence of records, got Dataset; "
        "pass its columns, data.with_format('numpy')[:] (a Hugging Face Dataset), or read a "
        "folder written by data.save_to_disk(folder) with HFEagerSource.")
    source = MemorySource(MemorySourceConfig(), ds.with_format("numpy")[:])  # as it says
    assert source.element_spec()["label"].dtype == np.int32  # int64 values that fit
    assert np.asarray(source.get_batch_at(0, 3)["label"]).tolist() == [3, 1, 2]


def test_records_of_narrow_dtypes_stack_as_numpy_promotes_them():
    """Mixed dtypes whose promotion holds every value and is no 64-bit float are kept."""
    source = MemorySource(MemorySourceConfig(), [{"a": np.uint8(200)}, {"a": np.int8(-6)}])
    assert source.data["a"].dtype == np.int16 and source.data["a"].tolist() == [200, -6]
    cast = MemorySource(MemorySourceConfig(cast_float64=True),
                        [{"a": np.float32(0.5)}, {"a": np.int32(3)}])
    assert cast.data["a"].dtype == np.float32 and cast.data["a"].tolist() == [0.5, 3.0]


def test_shuffle_is_grains_permutation_with_seed_plus_epoch():
    n = 37
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=42), {"x": np.arange(n, dtype=np.int32)})
    for epoch in range(3):
        expected = [grain_index_shuffle(index=i, max_index=n - 1, seed=42 + epoch, rounds=4) for i in range(n)]
        served = np.asarray(source.get_batch_at(epoch * n, n)["x"]).tolist()
        assert served == expected
        np.testing.assert_array_equal(np.asarray(source.record_indices_at(epoch * n, n)), expected)
    # Epoch 1 of seed 42 is epoch 0 of seed 43.
    other = MemorySource(MemorySourceConfig(shuffle=True, seed=43), {"x": np.arange(n, dtype=np.int32)})
    np.testing.assert_array_equal(np.asarray(source.get_batch_at(n, n)["x"]), np.asarray(other.get_batch_at(0, n)["x"]))


def test_direct_iteration_follows_the_shuffle_and_num_epochs():
    n = 6
    source = MemorySource(
        MemorySourceConfig(shuffle=True, seed=1, num_epochs=2, track_metadata=True),
        {"x": np.arange(n, dtype=np.int32) * 10},
    )
    elements = list(source)
    assert len(elements) == 12
    expected = [grain_index_shuffle(index=i, max_index=n - 1, seed=1 + e, rounds=4) for e in range(2) for i in range(n)]
    assert [e.metadata.index for e in elements] == expected
    assert [int(e.data["x"]) for e in elements] == [10 * i for i in expected]
    assert [e.metadata.epoch for e in elements] == [0] * n + [1] * n


def test_unbounded_direct_iteration():
    source = MemorySource(MemorySourceConfig(num_epochs=-1), {"x": np.arange(3, dtype=np.int32)})
    iterator = iter(source)
    assert [int(next(iterator)["x"]) for _ in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert source.get_state() == {"current_index": 2, "current_epoch": 2}


def test_pipeline_mirrors_position_into_source_state():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    iterator = iter(Pipeline(source=source, stages=[], batch_size=4))
    next(iterator)
    assert source.get_state() == {"current_index": 4, "current_epoch": 0}
    assert jax.tree.leaves(source.data)[0].shape == (10,)


def test_a_subclass_read_calling_super_serves_its_records():
    """A subclass that overrides get_batch_at and calls MemorySource's own read (to add a
    field) gets it, directly and through a Pipeline; no recursion between the two reads."""

    class WithDouble(MemorySource):
        def get_batch_at(self, start, size, key=None):
            batch = dict(super().get_batch_at(start, size, key))
            return {**batch, "double": batch["x"] * 2}

        def element_spec(self):
            spec = dict(super().element_spec())
            return {**spec, "double": spec["x"]}

    source = WithDouble(MemorySourceConfig(shuffle=True, seed=1), {"x": np.arange(10, dtype=np.int32)})
    direct = source.get_batch_at(0, 4)
    np.testing.assert_array_equal(np.asarray(direct["double"]), 2 * np.asarray(direct["x"]))
    assert not source.reads_by_position()
    batches = list(Pipeline(source, stages=[], batch_size=4))
    xs = np.concatenate([np.asarray(b["x"]) for b in batches])
    assert sorted(xs.tolist()) == list(range(10))
    for b in batches:
        np.testing.assert_array_equal(np.asarray(b["double"]), 2 * np.asarray(b["x"]))


@pytest.mark.parametrize("shuffle", [False, True])
def test_rngs_that_is_not_an_nnx_rngs_is_refused_naming_the_source(shuffle):
    with pytest.raises(ConfigError, match="MemorySource rngs must be an nnx.Rngs or None, got str '0'"):
        MemorySource(MemorySourceConfig(shuffle=shuffle), {"x": np.arange(3, dtype=np.int32)}, rngs="0")


def test_a_deep_copy_of_a_memory_source_continues_from_the_same_position_on_its_own() -> None:
    import copy

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(10, dtype=np.int32), "name": [str(i) for i in range(10)]})
    iterator = iter(Pipeline(source=source, stages=[], batch_size=4))
    first = next(iterator)["x"].tolist()
    twin = copy.deepcopy(source)
    rest = [b["x"].tolist() for b in Pipeline(source=twin, stages=[], batch_size=4)]
    assert rest == [b["x"].tolist() for b in iterator]
    assert sorted(first + sum(rest, [])) == list(range(10))


@pytest.mark.parametrize("record_shape", [(4, 4, 3), (2, 0, 3), (5, 1)])
def test_fields_of_many_axes_serve_their_records_bit_for_bit(record_shape):
    """A field kept one record a row on the device (its gather layout) is served, read
    directly, in its spec and in ``data``, in the records' own shape and values."""
    from flax import nnx

    from datarax import Pipeline

    n = 10
    images = np.arange(n * int(np.prod(record_shape)), dtype=np.uint8).reshape(n, *record_shape)
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3), {"image": images,
                                                                     "id": np.arange(n, dtype=np.int32)})
    assert source.data["image"].shape == (n, *record_shape)
    np.testing.assert_array_equal(np.asarray(source.data["image"]), images)
    assert source.element_spec()["image"].shape == record_shape
    direct = source.get_batch_at(4, 3)
    np.testing.assert_array_equal(np.asarray(direct["image"]), images[np.asarray(direct["id"])])
    batches = list(Pipeline(source=source, batch_size=4, rngs=nnx.Rngs(0)))
    served = np.concatenate([np.asarray(b["id"]) for b in batches])
    assert sorted(served.tolist()) == list(range(n))
    for b in batches:
        assert b["image"].shape[1:] == record_shape
        np.testing.assert_array_equal(np.asarray(b["image"]), images[np.asarray(b["id"])])
    record = next(iter(source))
    np.testing.assert_array_equal(np.asarray(record["image"]), images[int(record["id"])])


def test_a_subclass_read_its_spec_does_not_declare_is_refused():
    """A MemorySource's own spec and reads are not traced against each other
    (spec_from_own_reads); a subclass whose read adds a field its inherited
    element_spec() does not declare is still refused, naming the field."""
    from datarax.core.errors import SpecMismatchError

    class Extra(MemorySource):
        def get_batch_at(self, start, size, key=None):
            batch = dict(super().get_batch_at(start, size, key))
            return {**batch, "extra": batch["x"] + 1}

    data = {"x": np.arange(6, dtype=np.int32)}
    assert MemorySource(MemorySourceConfig(), data).spec_from_own_reads()
    source = Extra(MemorySourceConfig(), data)
    assert not source.spec_from_own_reads()
    with pytest.raises(SpecMismatchError, match="extra"):
        list(Pipeline(source, stages=[], batch_size=2))


def test_records_with_the_same_fields_in_another_order_are_taken():
    records = [{"x": 1, "y": 10, "a": {"p": 5, "q": 6}}, {"y": 20, "a": {"q": 8, "p": 7}, "x": 2}]
    batch = next(iter(Pipeline(source=MemorySource(MemorySourceConfig(), records), stages=[],
                               batch_size=2)))
    assert batch["x"].tolist() == [1, 2] and batch["y"].tolist() == [10, 20]
    assert batch["a"]["p"].tolist() == [5, 7] and batch["a"]["q"].tolist() == [6, 8]


@pytest.mark.parametrize("data, where", [
    ([{1: 0, "1": 5}, {1: 1, "1": 6}], ""),  # 1 and '1' would both be field '1'
    ({0: np.arange(3)}, ""),
    ({"a": {2: np.arange(3)}}, " in field 'a'"),
    ([{"a": {(1, 2): 0}}], " in field 'a'"),
])
def test_a_field_name_that_is_not_a_str_is_refused_not_renamed(data, where):
    with pytest.raises(DataraxError, match=rf"MemorySource field names must be str; got \w+ "
                       rf".*{where}\. Name the field with a str"):
        MemorySource(MemorySourceConfig(), data)
