"""The two read modes (datarax.core.reading): what a pipeline decides of its source once."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.indexed import IndexedSource
from datarax.core.reading import (
    ReadMode, compiled, compiles_whole, cursor_of, forward_only, kind_for, read_at, read_mode,
    reading_of,
)
from datarax.core.stream import StreamSource
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


@dataclass(frozen=True)
class _Config(StructuralConfig):
    pass


class _Mixin:
    def label(self) -> str:
        return "mixin"


class _Positions(_Mixin, DataSourceModule):
    """Written directly on DataSourceModule, after a mixin: an indexed source."""

    def __len__(self):
        return 5

    def get_batch_at(self, start, size, key=None):
        return {"x": (jnp.arange(size) + start) % 5}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


class _Counter(DataSourceModule):
    """A forward-only stream of 4 records."""

    def __init__(self):
        super().__init__(_Config())
        self.sent = 0

    def restart(self, epoch):
        self.sent = 0

    def get_batch(self, batch_size):
        if self.sent >= 4:
            return None
        n = min(batch_size, 4 - self.sent)
        out = {"x": np.arange(self.sent, self.sent + n, dtype=np.int32)}
        self.sent += n
        return out

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


def _memory(n=6):
    return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})


def _npy(tmp_path, n=6, name="x.npy"):
    path = tmp_path / name
    np.save(path, np.arange(n, dtype=np.int32))
    return NpySource(NpySourceConfig(paths={"x": str(path)}))


def test_a_class_gets_its_kinds_base_when_it_is_created_keeping_its_other_bases():
    assert _Positions.__bases__ == (_Mixin, IndexedSource)
    assert _Counter.__bases__ == (StreamSource,)
    source = _Positions(_Config())
    assert source.label() == "mixin" and source.kind is SourceKind.INDEXED
    assert [int(r["x"]) for r in source] == [0, 1, 2, 3, 4]


def test_each_kind_has_its_mode():
    assert read_mode(_memory()) is ReadMode.COMPILED
    assert read_mode(_Counter()) is ReadMode.CURSOR
    assert compiled(_Positions(_Config())) and not compiled(_Counter())
    assert forward_only(_Counter()) and not forward_only(_memory())
    assert [kind_for(ReadMode.COMPILED), kind_for(ReadMode.CURSOR),
            kind_for(ReadMode.CURSOR, forward_only=True)] == [
        SourceKind.INDEXED, SourceKind.HOST, SourceKind.STREAM]


def test_reading_says_what_each_source_can_do(tmp_path):
    memory = reading_of(_memory())
    assert (memory.mode, memory.kind, memory.read_ahead, memory.reshares) == (
        ReadMode.COMPILED, SourceKind.INDEXED, False, True)
    assert memory.reads_by_position and not memory.counts_skips
    host = _npy(tmp_path)
    try:
        files = reading_of(host)
        assert (files.mode, files.kind, files.read_ahead, files.reshares) == (
            ReadMode.CURSOR, SourceKind.HOST, True, True)
        assert files.closes_epoch and not files.forward_only and not files.reads_by_position
    finally:
        host.close()
    stream = reading_of(_Counter())
    assert (stream.mode, stream.kind_name, stream.forward_only, stream.reshares) == (
        ReadMode.CURSOR, "stream", True, False)


def test_a_concatenation_takes_its_mode_from_its_parts_once(tmp_path):
    assert compiles_whole([_memory(), _memory()])
    assert reading_of(ConcatSource([_memory(), _memory()])).mode is ReadMode.COMPILED
    host = ConcatSource([_memory(), _npy(tmp_path)])
    assert (reading_of(host).mode, host.kind) == (ReadMode.CURSOR, SourceKind.HOST)
    assert reading_of(host).counts_skips and "skipped" in host.get_state()
    stream = ConcatSource([_memory(), _Counter()])
    assert reading_of(stream).forward_only and "skipped" not in stream.get_state()
    host.close()


def test_the_plan_keeps_the_reading_decided_when_the_pipeline_is_built(tmp_path):
    source = _npy(tmp_path)
    pipeline = Pipeline(source, batch_size=4, seed=0)
    try:
        assert pipeline.plan.reading == reading_of(source)
        assert [b["x"].tolist() for b in pipeline] == [[0, 1, 2, 3], [4, 5]]
    finally:
        source.close()


def test_cursor_of_reads_ahead_without_moving_the_position(tmp_path):
    assert cursor_of(_memory()) is None  # computed in the step: no cursor
    assert cursor_of(_Counter()) is None  # read on the loop's thread
    source = _npy(tmp_path)
    try:
        cursor = cursor_of(source)
        columns, indices, end = cursor.peek(4)
        assert columns["x"].tolist() == [0, 1, 2, 3] and end == 4 and source.index == 0
        assert isinstance(cursor.ready(2), bool)
        cursor.commit(end)
        assert source.index == 4 and cursor.current
        cursor.release()
    finally:
        source.close()


def test_read_at_reads_a_child_of_any_mode_alike(tmp_path):
    memory, files, stream = _memory(), _npy(tmp_path), _Counter()
    try:
        for child, length in ((memory, 6), (files, 6), (stream, None)):
            batch, stable, end = read_at(child, 0, 1, 2, length)
            assert (batch["x"].tolist(), stable.tolist(), end) == ([1, 2], [1, 2], 3)
        assert (memory.index, files.index, stream.index) == (0, 3, 3)  # compiled: unmoved
        batch, _, end = read_at(files, 1, 4, 5, 6)  # standing elsewhere: moved there
        assert (batch["x"].tolist(), end, files.epoch, files.index) == ([4, 5], 6, 1, 6)
        assert read_at(files, 1, 6, 2, 6)[0] is None and read_at(memory, 0, 6, 2, 6)[0] is None
        batch, _, end = read_at(stream, 0, 3, 5, None)  # read on from where it stands
        assert (batch["x"].tolist(), end) == ([3], 4)
        assert read_at(stream, 0, 4, 2, None)[::2] == (None, 4)  # its pass ends at 4
    finally:
        files.close()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stream_is_refused_an_elastic_restore_naming_its_kind(prefetch):
    saved = Pipeline(_Counter(), batch_size=2, seed=0, prefetch=prefetch,
                     shard_index=0, shard_count=2).get_state()
    other = Pipeline(_Counter(), batch_size=2, seed=0, prefetch=prefetch)
    with pytest.raises(Exception, match="a stream source"):
        other.set_state(saved)


_FIRST_EPOCH_COMPILES = r'''
import logging, os, sys
os.environ["DATARAX_COMPILE_CACHE"] = "0"
import jax, numpy as np
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, ShuffleBufferSource

compiles = []
class Compiles(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Compiling "):
            compiles.append(record.getMessage())
logger = logging.getLogger("jax")
logger.addHandler(Compiles())
logger.setLevel(logging.DEBUG)
parts = [MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"x": np.arange(20, dtype=np.int32)}),
         MemorySource(MemorySourceConfig(shuffle=True, seed=2), {"x": np.arange(100, 130, dtype=np.int32)})]
source = ShuffleBufferSource(ConcatSource(parts), buffer_size=8, seed=3)
pipeline = Pipeline(source, stages=[FilterOperator(predicate=lambda el: el.data["x"] % 3 != 0)],
                    batch_size=4, seed=0)
with jax.log_compiles(True):
    records = sum(len(b["x"]) for b in pipeline)
print(records, len(compiles))
'''


def test_a_compiled_child_read_by_its_owner_compiles_one_read_program(tmp_path):
    # run op by op, one epoch of a shuffle buffer over a concatenation compiled ~34
    # programs (one per operation of the concatenation's read); now its read and the
    # filter's step: counted in a fresh process, so nothing earlier was compiled
    from fresh_process import run_script

    done = run_script(tmp_path / "compiles.py", _FIRST_EPOCH_COMPILES, timeout=120)
    assert done.returncode == 0, done.stderr
    records, compiles = map(int, done.stdout.split())
    assert records == 33  # 50 records, 17 multiples of 3 dropped
    assert compiles <= 4


class _ConcreteStart(DataSourceModule):
    """A user's child reading with a concrete start (int(start), a Python if)."""

    def __len__(self):
        return 6

    def get_batch_at(self, start, size, key=None):
        first = int(start)
        offset = 100 if first > 3 else 0
        return {"x": (jnp.arange(size, dtype=jnp.int32) + first) % 6 + offset}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


def test_a_composite_child_with_a_user_part_needing_a_concrete_start_is_read_op_by_op():
    from datarax.sources import ShuffleBufferSource

    memory = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    concat = ConcatSource([memory, _ConcreteStart(_Config())])
    records = [int(r["x"]) for r in ShuffleBufferSource(concat, buffer_size=4, seed=1)]
    assert records == [2, 1, 0, 3, 0, 4, 1, 2, 3, 5, 4]
    assert sorted(records) == sorted(list(range(5)) + list(range(6)))
