"""The DataSourceModule contract: kinds, refusal of neither, iteration, state."""

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.errors import ConfigError, SourceContractError, SpecMismatchError, StateError
from datarax.core.spec import array_to_spec_strip_leading
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


@dataclass(frozen=True)
class EmptyConfig(StructuralConfig):
    pass


class Neither(DataSourceModule):
    def element_spec(self):
        return {}


class Stream(DataSourceModule):
    """A forward-only stream of `total` records with field x = position."""

    def __init__(self, total=10, dtype=np.int32, spec_dtype=np.int32):
        super().__init__(EmptyConfig())
        self.total, self.dtype, self.spec_dtype = total, dtype, spec_dtype
        self.sent = 0

    def restart(self, epoch):
        self.sent = 0

    def get_batch(self, batch_size):
        if self.sent >= self.total:
            return None
        n = min(batch_size, self.total - self.sent)
        batch = {"x": np.arange(self.sent, self.sent + n).astype(self.dtype)}
        self.sent += n
        return batch

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), self.spec_dtype)}


class Indexed(DataSourceModule):
    def __init__(self, n=6):
        super().__init__(EmptyConfig())
        self.values = nnx.data(jnp.arange(n) * 10)

    def __len__(self):
        return int(self.values.shape[0])

    def get_batch_at(self, start, size, key=None):
        return {"v": self.values[(jnp.arange(size) + start) % len(self)]}


def test_config_must_be_a_structural_config():
    with pytest.raises(ConfigError, match="Neither needs a StructuralConfig instance as its first argument, got dict"):
        Neither({"not": "config"})  # type: ignore[arg-type]


def test_source_with_neither_method_is_refused_at_iteration_not_construction():
    source = Neither(EmptyConfig())  # construction is fine
    pipeline = Pipeline(source=source, stages=[], batch_size=2)
    for attempt in (lambda: iter(pipeline), lambda: iter(source)):
        with pytest.raises(SourceContractError) as info:
            attempt()
        assert "get_batch_at(start, size, key)" in str(info.value)
        assert "get_batch(batch_size)" in str(info.value)


def test_kinds_are_detected_from_the_methods_implemented():
    assert Indexed().kind is SourceKind.INDEXED and Indexed().supports_indexed_access()
    assert Stream().kind is SourceKind.STREAM and not Stream().supports_indexed_access()


def test_default_element_spec_and_record_indices_of_indexed_source():
    source = Indexed()
    spec = source.element_spec()
    assert spec["v"].shape == () and spec["v"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(source.record_indices_at(4, 4)), [4, 5, 0, 1])


def test_streaming_source_runs_on_host_path_one_epoch_per_iter():
    pipeline = Pipeline(source=Stream(10), stages=[], batch_size=4)
    for _ in range(2):
        batches = [np.asarray(b["x"]).tolist() for b in pipeline]
        assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert all(isinstance(b, jax.Array) for b in next(iter(pipeline)).values())


def test_streaming_batches_are_checked_against_element_spec():
    pipeline = Pipeline(source=Stream(10, dtype=np.int16), stages=[], batch_size=4)
    with pytest.raises(SpecMismatchError, match="field 'x' has dtype int16, declared int32") as info:
        next(iter(pipeline))
    assert "Stream batch at record 0 of epoch 0" in str(info.value)


def test_streaming_sixty_four_bit_declaration_is_refused():
    pipeline = Pipeline(source=Stream(10, dtype=np.int64, spec_dtype=np.int64), stages=[], batch_size=4)
    with pytest.raises(SpecMismatchError, match="declares 64-bit field.*'x' \\(int64\\)"):
        next(iter(pipeline))


def test_stream_resume_fast_forwards_a_fresh_stream():
    first = iter(Pipeline(source=Stream(10), stages=[], batch_size=3))
    next(first)
    next(first)
    state = first.get_state()
    assert state["source"] == {"current_index": 6, "current_epoch": 0}
    rest = iter(Pipeline(source=Stream(10), stages=[], batch_size=3))
    rest.set_state(state)
    assert [np.asarray(b["x"]).tolist() for b in rest] == [[6, 7, 8], [9]]


def test_direct_iteration_of_a_stream_and_state():
    source = Stream(5)
    assert [int(r["x"]) for r in source] == [0, 1, 2, 3, 4]
    assert source.get_state() == {"current_index": 5, "current_epoch": 0}


class NoRewind(Stream):
    """A stream whose restart does not rewind: every pass after the first is empty."""

    def restart(self, epoch):
        pass


def test_a_stream_that_does_not_rewind_is_refused_naming_the_passes():
    pipeline = Pipeline(source=NoRewind(total=5), stages=[], batch_size=2)
    assert [b["x"].tolist() for b in pipeline] == [[0, 1], [2, 3], [4]]
    with pytest.raises(SourceContractError, match=r"NoRewind served 5 records in pass 0 and "
                       r"none in pass 1: a forward-only stream must be rewound between passes"):
        list(pipeline)
    source = NoRewind(total=3)  # direct iteration: the finished pass 0 is read again
    assert [int(r["x"]) for r in source] == [0, 1, 2]
    with pytest.raises(SourceContractError, match=r"NoRewind served 3 records in pass 0 and "
                       r"none when pass 0 was read again: a forward-only stream must be rewound"):
        list(source)


def test_set_state_refuses_bad_dicts():
    source = Indexed()
    with pytest.raises(StateError, match="missing 'current_epoch'"):
        source.set_state({"current_index": 1})
    with pytest.raises(StateError, match=r"'current_index' must be an int in \[0, 6\] .*, got -1"):
        source.set_state({"current_index": -1, "current_epoch": 0})
    with pytest.raises(StateError, match=r"'current_index' must be an int in \[0, 6\] "
                       r"\(records handed out of a pass of 6\), got 7"):
        source.set_state({"current_index": 7, "current_epoch": 0})
    with pytest.raises(StateError, match="expects the dict get_state\\(\\) returned"):
        source.set_state([1, 2])  # type: ignore[arg-type]


def test_direct_iteration_of_indexed_source_and_restart_after_the_end():
    source = Indexed(3)
    assert [int(r["v"]) for r in source] == [0, 10, 20]
    assert [int(r["v"]) for r in source] == [0, 10, 20]
    iterator = iter(source)
    next(iterator)
    fresh = Indexed(3)
    fresh.set_state(source.get_state())
    assert [int(r["v"]) for r in fresh] == [10, 20]


def test_spec_is_read_once_per_source():
    calls = []

    class Counting(Stream):
        def element_spec(self) -> dict[str, Any]:
            calls.append(1)
            return {"x": array_to_spec_strip_leading(np.zeros((1,), np.int32))}

    pipeline = Pipeline(source=Counting(10), stages=[], batch_size=2)
    for _ in range(2):
        list(pipeline)
    assert len(calls) == 1


def test_empty_indexed_source_is_refused_by_pipeline():
    class Empty(Indexed):
        def __len__(self):
            return 0

    with pytest.raises(ConfigError, match="Pipeline source Empty holds no records"):
        Pipeline(source=Empty(), stages=[], batch_size=2)


def test_indexed_source_without_len_is_refused():
    class NoLen(DataSourceModule):
        def get_batch_at(self, start, size, key=None):
            return {"v": jnp.arange(size) + start}

    with pytest.raises(SourceContractError, match="implements get_batch_at but not __len__"):
        Pipeline(source=NoLen(EmptyConfig()), stages=[], batch_size=2)


def test_sources_have_no_batch_method():
    assert not hasattr(Indexed(), "batch") and not hasattr(Stream(), "batch")


def test_stream_without_element_spec_is_refused_when_the_pipeline_is_built():
    class NoSpec(DataSourceModule):
        def get_batch(self, batch_size):
            return None

    with pytest.raises(SourceContractError, match="NoSpec implements get_batch but not element_spec"):
        Pipeline(source=NoSpec(EmptyConfig()), stages=[], batch_size=2)


def test_stream_shards_are_equal_whole_rounds_and_disjoint():
    shares = []
    for index in range(2):
        pipeline = Pipeline(source=Stream(21), stages=[], batch_size=4, shard_index=index, shard_count=2)
        shares.append([int(v) for b in pipeline for v in np.asarray(b["x"])])
    assert shares[0] == list(range(0, 20, 2)) and shares[1] == list(range(1, 20, 2))


def test_stream_shard_resume_is_exact():
    first = iter(Pipeline(source=Stream(21), stages=[], batch_size=3, shard_index=1, shard_count=2))
    got = [int(v) for v in np.asarray(next(first)["x"])]
    rest = iter(Pipeline(source=Stream(21), stages=[], batch_size=3, shard_index=1, shard_count=2))
    rest.set_state(first.get_state())
    got += [int(v) for b in rest for v in np.asarray(b["x"])]
    assert got == list(range(1, 20, 2))


def test_check_finite_on_the_host_path():
    class Floats(Stream):
        def get_batch(self, batch_size):
            batch = super().get_batch(batch_size)
            if batch is not None:
                batch = {"x": batch["x"].astype(np.float32)}
                batch["x"][batch["x"] == 6] = np.inf
            return batch

        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.float32)}

    with pytest.raises(SpecMismatchError, match="field 'x' of the record at position 6 of epoch 0 \\(stable index 6\\) holds NaN or inf"):
        list(Pipeline(source=Floats(10), stages=[], batch_size=4, check_finite=True))


class _CloseFails(MemorySource):
    def close(self) -> None:
        raise OSError("reader gone")


def test_a_failing_close_never_hides_the_with_blocks_error() -> None:
    source = _CloseFails(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(KeyError) as caught:
        with source:
            raise KeyError("the block's own error")
    assert caught.value.args == ("the block's own error",)
    assert caught.value.__notes__ == ["closing the _CloseFails also failed: OSError: reader gone"]
    with pytest.raises(OSError, match="reader gone"):  # with no error in the block it is raised
        with source:
            pass


class Labeled(DataSourceModule):
    """An indexed source keeping plain Python containers as attributes, as custom sources
    do (file names, class names): they make its NNX graph definition unhashable."""

    def __init__(self, files, classes):
        super().__init__(EmptyConfig())
        self.values = nnx.data(jnp.arange(6, dtype=jnp.int32))
        self.files, self.classes = files, classes

    def __len__(self):
        return 6

    def get_batch_at(self, start, size, key=None):
        return {"x": self.values[(jnp.arange(size) + start) % 6]}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


def test_a_source_with_list_and_dict_attributes_runs_in_a_pipeline():
    from datarax.operators import ElementOperator, ElementOperatorConfig

    def plus_one(element, key=None):
        return element.update_data({"x": element.data["x"] + 1})

    source = Labeled(["a.csv", "b.csv"], {"cat": 0, "dog": 1})
    op = ElementOperator(ElementOperatorConfig(stochastic=False), fn=plus_one)
    pipeline = Pipeline(source=source, stages=[op], batch_size=4, rngs=nnx.Rngs(0))
    for _ in range(2):  # a second pass reuses the compiled step
        assert [b["x"].tolist() for b in pipeline] == [[1, 2, 3, 4], [5, 6]]
    bare = Pipeline(source=Labeled(["a.csv"], {"cat": 0}), stages=[], batch_size=4)
    assert [b["x"].tolist() for b in bare] == [[0, 1, 2, 3], [4, 5]]


def test_a_source_with_list_and_dict_attributes_runs_under_a_filter():
    from datarax.operators import FilterOperator

    source = Labeled(["a.csv", "b.csv"], {"cat": 0, "dog": 1})
    keep_even = FilterOperator(predicate=lambda element: element.data["x"] % 2 == 0)
    pipeline = Pipeline(source=source, stages=[keep_even], batch_size=2)
    for _ in range(2):
        assert [b["x"].tolist() for b in pipeline] == [[0, 2], [4]]


class Wide(Indexed):
    """An indexed source whose declared spec says float64 (e.g. numpy rows of a CSV)."""

    def element_spec(self):
        return {"v": jax.ShapeDtypeStruct((), np.float64)}


def test_indexed_sixty_four_bit_declaration_is_refused_not_narrowed():
    if jax.config.jax_enable_x64:
        pytest.skip("x64 is on: 64-bit fields are kept")
    pipeline = Pipeline(source=Wide(), stages=[], batch_size=2)
    with pytest.raises(SpecMismatchError, match=r"Wide.element_spec\(\) declares 64-bit "
                                                r"field\(s\) 'v' \(float64\) but jax_enable_x64"):
        next(iter(pipeline))
    with pytest.raises(SpecMismatchError, match=r"Wide.element_spec\(\) declares 64-bit"):
        pipeline.scan(lambda batch: batch["v"].sum(), 3)


class _Squares(DataSourceModule):
    """An indexed source defined on DataSourceModule (its kind comes from get_batch_at)."""

    def __init__(self):
        super().__init__(EmptyConfig())

    def __len__(self):
        return 4

    def get_batch_at(self, start, size, key=None):
        i = (jnp.arange(size) + start) % 4
        return {"x": i * i}


@pytest.mark.parametrize("make", [
    lambda: MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)]),
    _Squares,
])
@pytest.mark.parametrize("method", ["get_batch_at", "get_batch_and_indices_at"])
@pytest.mark.parametrize("start", [-1, np.int64(-3), 2**31 - 1])
def test_concrete_start_outside_global_positions_is_refused(make, method, start):
    source = make()
    with pytest.raises(ConfigError) as err:
        getattr(source, method)(start, 2)
    message = str(err.value)
    name = type(source).__name__
    assert f"{name}.{method}: start={int(start)} is not a global record position" in message
    assert "valid starts are 0 .. 2147483646" in message


def test_concrete_start_inside_global_positions_still_reads_and_wraps():
    source = MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)])
    assert source.get_batch_at(3, 4)["x"].tolist() == [3, 4, 0, 1]  # into epoch 1
    assert source.get_batch_at(np.int32(7), 2)["x"].tolist() == [2, 3]
    batch, indices = _Squares().get_batch_and_indices_at(2, 3)
    assert batch["x"].tolist() == [4, 9, 0] and indices.tolist() == [2, 3, 0]


def test_traced_start_is_not_checked():
    source = MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)])
    read = jax.jit(lambda start: source.get_batch_at(start, 2)["x"])
    assert read(jnp.int32(-1)).tolist() == [4, 0]  # the compiled step's own positions


class _Slices(_Squares):
    """get_batch_at written for a Python int start (a slice), not traceable."""

    def get_batch_at(self, start, size, key=None):
        return {"x": jnp.arange(4)[int(start):int(start) + size]}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


def test_an_untraceable_get_batch_at_is_named_with_what_to_write_instead():
    assert [int(r["x"]) for r in _Slices()] == [0, 1, 2, 3]  # direct reads pass an int start
    with pytest.raises(ConfigError) as err:
        next(iter(Pipeline(source=_Slices(), stages=[], batch_size=2)))
    message = str(err.value)
    assert message.startswith("_Slices.get_batch_at needs a concrete value of a traced array")
    assert "start is a traced integer there" in message
    assert "i = (jnp.arange(size) + start) % len(self)" in message


def test_indexed_spec_is_compared_with_the_reads_unless_the_source_says_it_is_read_off_them():
    """``spec_from_own_reads()`` is declared by every source (default False): by default a
    declared spec that differs from ``get_batch_at`` is refused when the pass starts; a
    source answering True is taken at its word (its reads are not traced to compare)."""

    class Wide(Indexed):
        def element_spec(self):
            return {"v": jax.ShapeDtypeStruct((2,), np.int32)}

    class Trusted(Wide):
        def spec_from_own_reads(self):
            return True

    assert Indexed().spec_from_own_reads() is False
    with pytest.raises(SpecMismatchError, match="field 'v' has per-record shape \\(\\), declared \\(2,\\)"):
        next(iter(Pipeline(source=Wide(), stages=[], batch_size=4)))
    batches = [np.asarray(b["v"]).tolist() for b in Pipeline(source=Trusted(), stages=[], batch_size=4)]
    assert batches == [[0, 10, 20, 30], [40, 50]]


def test_a_source_has_no_batch_method_and_says_the_pipeline_batches():
    source = Stream(4)
    assert not hasattr(source, "batch")
    with pytest.raises(AttributeError, match=r"'Stream' object has no attribute 'batch': "
                       r"sources do not batch; batching is the Pipeline's job"):
        source.batch(2)
    with pytest.raises(AttributeError, match=r"^'Stream' object has no attribute 'shuffle'$"):
        source.shuffle  # noqa: B018 - other missing names keep Python's message
    source.batch = "a user's own attribute"  # still settable (only a missing one is named)
    assert source.batch == "a user's own attribute"


def test_a_source_class_defined_first_in_a_fresh_process_gets_its_kind_base(tmp_path):
    """``datarax.core`` imports its names on first use: a user's stream (or indexed) class
    defined right after ``from datarax.core import DataSourceModule`` still derives from
    its kind's base, loaded then."""
    from fresh_process import run_script

    done = run_script(tmp_path / "kinds.py", (
        "import numpy as np\n"
        "from datarax.core import DataSourceModule\n"
        "class Lines(DataSourceModule):\n"
        "    def get_batch(self, batch_size):\n"
        "        return None\n"
        "class Rows(DataSourceModule):\n"
        "    def get_batch_at(self, start, size, key=None):\n"
        "        return None\n"
        "print(Lines.kind.value, Lines.__mro__[1].__name__, Rows.kind.value,"
        " Rows.__mro__[1].__name__)\n"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stream", "StreamSource", "indexed", "IndexedSource"]
