"""A batch that fails is not served, and nothing of it is lost: after the error (NaN
under check_finite, a stage raising, a record that does not decode, Ctrl-C mid-read)
the source stands where the batch began, so ``next()`` again, a new ``iter(pipeline)``
or a state saved now serves exactly those records again (or meets the same error).
Every path: host sources read on the loop's thread (``prefetch=0``, or a source without
a read-ahead cursor) and read ahead, indexed sources dispatched here and ahead."""

from __future__ import annotations

import contextlib
import itertools
import threading
import types
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import RecordError, SpecMismatchError
from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline, ahead
from datarax.pipeline.plan import PipelineSession
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig

from bad_rows import Rows, RowsConfig
from waiting import eventually

PATHS = [("host", 0), ("host", 2), ("indexed", 0), ("indexed", 2)]


def array_source(kind: str, tmp_path, data: np.ndarray):
    if kind == "indexed":
        return MemorySource(MemorySourceConfig(), {"data": data})
    path = tmp_path / f"x{abs(hash(data.tobytes()))}.npy"
    np.save(path, data)
    return NpySource(NpySourceConfig(paths=str(path)))


def values(batch: Any, field: str = "data") -> list[float]:
    return np.asarray(batch[field]).tolist()


def rest(iterator: Any, field: str = "data") -> list[list[float]]:
    return [values(b, field) for b in iterator]


# ------------------------------------------------------------- NaN, check_finite
@pytest.mark.parametrize("kind,prefetch", PATHS)
def test_a_nan_batch_is_not_skipped_by_a_retry(kind, prefetch, tmp_path):
    data = np.arange(16, dtype=np.float32)
    data[5] = np.nan
    source = array_source(kind, tmp_path, data)
    pipeline = Pipeline(source=source, stages=[], batch_size=4, check_finite=True,
                        prefetch=prefetch)
    it = iter(pipeline)
    assert values(next(it)) == [0, 1, 2, 3]
    for _ in range(2):  # the same error every time: records 4-7 are never passed over
        with pytest.raises(SpecMismatchError, match="position 5 of epoch 0"):
            next(it)
        assert source.index == 4
        assert it.get_state()["position"] == 4
    # a new loop is no break: it continues the pass at the failed batch (not epoch 1)
    it = iter(pipeline)
    with pytest.raises(SpecMismatchError, match="position 5 of epoch 0"):
        next(it)
    state = it.get_state()
    assert (state["epoch"], state["position"]) == (0, 4)
    # the state saved after the failure resumes at the failed batch (data fixed)
    fixed = array_source(kind, tmp_path, np.arange(16, dtype=np.float32))
    resumed = iter(Pipeline(source=fixed, stages=[], batch_size=4, check_finite=True,
                            prefetch=prefetch))
    resumed.set_state(state)
    assert rest(resumed) == [[4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_nan_in_the_first_batch_leaves_the_source_at_its_start(prefetch, tmp_path):
    data = np.arange(12, dtype=np.float32)
    data[1] = np.nan
    source = array_source("host", tmp_path, data)
    it = iter(Pipeline(source=source, stages=[], batch_size=4, check_finite=True,
                       prefetch=prefetch))
    for _ in range(2):
        with pytest.raises(SpecMismatchError, match="position 1 of epoch 0"):
            next(it)
        assert source.get_state()["current_index"] == 0


# ------------------------------------------------------------------ a stage raising
@pytest.mark.parametrize("kind,prefetch", PATHS)
@pytest.mark.parametrize("again", ["next", "new iter"])
def test_a_stage_that_raised_once_serves_the_same_batch_on_retry(kind, prefetch, again,
                                                                 tmp_path):
    calls = []

    def flaky(element, key=None):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("stage broke once")
        return element

    source = array_source(kind, tmp_path, np.arange(10, dtype=np.int32))
    pipeline = Pipeline(source=source, stages=[ElementOperator(ElementOperatorConfig(),
                                                               fn=flaky)],
                        batch_size=4, prefetch=prefetch)
    it = iter(pipeline)
    with pytest.raises(RuntimeError, match="stage broke once"):
        next(it)
    assert source.index == 0 and pipeline.get_state()["position"] == 0
    if again == "new iter":  # not a break: the pass continues at the failed batch
        it = iter(pipeline)
    assert rest(it) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert pipeline.epoch == 1 and source.index == 0


# ----------------------------------------------- records that do not decode, skips
class ShortReads(Rows):
    """At most 3 records a read (short batches mid-pass, which the pipeline joins);
    no read-ahead cursor, so the pipeline reads on its loop's thread. A read in
    ``interrupt`` (by its number) is cut off by Ctrl-C."""

    def __init__(self, config: RowsConfig, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.interrupt: set[int] = set()
        self.reads = 0

    def get_batch_with_indices(self, batch_size):
        self.reads += 1
        if self.reads in self.interrupt:
            raise KeyboardInterrupt
        return super().get_batch_with_indices(min(batch_size, 3))


@pytest.mark.parametrize("cls,prefetch", [(Rows, 0), (Rows, 2), (ShortReads, 2)])
def test_a_record_that_does_not_decode_is_read_again(cls, prefetch):
    source = cls(RowsConfig(), bad={7})
    it = iter(Pipeline(source=source, stages=[], batch_size=4, prefetch=prefetch))
    assert values(next(it), "x") == [0, 1, 2, 3]
    for _ in range(2):
        with pytest.raises(RecordError, match="record 7 is broken"):
            next(it)
        assert source.index == 4 and it.get_state()["position"] == 4
    source.bad.clear()  # the record repaired: the retry serves the batch that failed
    assert rest(it, "x") == [[4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


@pytest.mark.parametrize("cls,prefetch", [(Rows, 0), (Rows, 2), (ShortReads, 0)])
def test_a_failed_batch_with_a_skipped_record_is_not_counted_twice(cls, prefetch):
    source = cls(RowsConfig(on_error="skip", max_skipped=1), bad={5}, nan={7})
    pipeline = Pipeline(source=source, stages=[], batch_size=4, check_finite=True,
                        prefetch=prefetch)
    it = iter(pipeline)
    assert values(next(it), "x") == [0, 1, 2, 3]
    for _ in range(3):  # retried: record 5 skipped again, not over the budget of one
        with pytest.raises(SpecMismatchError, match="NaN"):
            next(it)
        assert source.get_state()["current_index"] == 4
        assert source.get_state()["skipped"] == 0
    state = it.get_state()
    fixed = cls(RowsConfig(on_error="skip", max_skipped=1), bad={5})
    resumed = iter(Pipeline(source=fixed, stages=[], batch_size=4, check_finite=True,
                            prefetch=prefetch))
    resumed.set_state(state)
    assert rest(resumed, "x") == [[4, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15]]
    source.nan.clear()
    assert rest(it, "x") == [[4, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15]]
    assert int(source.skipped.get_value()) == 0  # the next epoch's count (pass ended)


# --------------------------------------------------------------------- Ctrl-C
def test_an_interrupt_between_two_reads_of_a_batch_reads_it_again():
    source = ShortReads(RowsConfig())
    source.interrupt = {4}  # batch 2's second read: its first moved the source to 6
    it = iter(Pipeline(source=source, stages=[], batch_size=4, prefetch=0))
    assert rest([next(it)], "x") == [[0, 1, 2, 3]]
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert source.index == 4 and it.get_state()["position"] == 4
    assert rest(it, "x") == [[4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


@pytest.mark.parametrize("kind,prefetch", PATHS)
def test_an_interrupt_after_the_batch_was_taken_serves_it_again(kind, prefetch, tmp_path,
                                                                 monkeypatch):
    """Ctrl-C at the last moment of next(): the batch was taken from the read-ahead and
    the position moved past it, but it never reached the loop."""
    armed = []
    note_left = PipelineSession.note_left

    def interrupted(self, source):
        note_left(self, source)
        if armed:
            armed.clear()
            raise KeyboardInterrupt

    monkeypatch.setattr(PipelineSession, "note_left", interrupted)
    source = array_source(kind, tmp_path, np.arange(12, dtype=np.int32))
    it = iter(Pipeline(source=source, stages=[], batch_size=4, prefetch=prefetch))
    assert values(next(it)) == [0, 1, 2, 3]
    armed.append(True)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert source.index == 4 and it.get_state()["position"] == 4
    assert rest(it) == [[4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("kind", ["host", "indexed"])
def test_an_interrupt_while_the_worker_starts_ends_the_worker(kind, tmp_path, monkeypatch):
    """Ctrl-C landing in the worker's start (next() waits there for the new thread): the
    worker ends without making any batch (none beside the caller's retry, none no one
    takes), and the pass goes on."""
    started: list[threading.Thread] = []

    class CutStart(threading.Thread):
        def start(self) -> None:
            super().start()
            if not started:
                started.append(self)
                raise KeyboardInterrupt

    makers: list[threading.Thread] = []  # the thread of each produce() call

    class Counted(ahead.DispatchAhead):
        def __init__(self, produce: Any, *args: Any) -> None:
            def counted() -> Any:
                makers.append(threading.current_thread())
                return produce()
            super().__init__(counted, *args)

    monkeypatch.setattr(ahead, "threading",
                        types.SimpleNamespace(**{**vars(threading), "Thread": CutStart}))
    monkeypatch.setattr(ahead, "DispatchAhead", Counted)
    source = array_source(kind, tmp_path, np.arange(12, dtype=np.int32))
    it = iter(Pipeline(source=source, stages=[], batch_size=4, prefetch=2))
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert source.index == 0 and it.get_state()["position"] == 0
    assert eventually(lambda: not started[0].is_alive())
    assert started[0] not in makers  # it never read the source beside the caller
    assert rest(it) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


class InterruptedRead(Rows):
    """A read (on a reader thread) of a chunk holding record ``at`` is cut off by Ctrl-C
    once."""

    def __init__(self, config: RowsConfig, at: int, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.at: int | None = at

    def read_records(self, indices):
        if self.at in list(indices):
            self.at = None
            raise KeyboardInterrupt
        return super().read_records(indices)


@pytest.mark.parametrize("read", ["get_batch", "for record in source"])
def test_direct_reads_go_on_after_an_interrupted_read_on_a_reader_thread(read):
    source = InterruptedRead(RowsConfig(), at=70, n=100)
    got: list[float] = []
    records = iter(source)
    for _ in range(2):  # the retry reads the chunk again: not its stored Ctrl-C again
        with contextlib.suppress(KeyboardInterrupt):
            if read == "get_batch":
                while (batch := source.get_batch_with_indices(4)[0]) is not None:
                    got += values(batch, "x")
            else:
                for record in records:
                    got.append(float(record["x"]))
    assert got == list(range(100))
    source.close()


# ------------------------------------------------------------------ filtered
@pytest.mark.parametrize("kind,prefetch", PATHS)
def test_a_filtered_pipeline_retries_alike(kind, prefetch, tmp_path):
    data = np.arange(16, dtype=np.float32)
    data[7] = np.nan
    source = array_source(kind, tmp_path, data)
    not2 = FilterOperator(predicate=lambda el: el.data["data"] != 2)
    it = iter(Pipeline(source=source, stages=[not2], batch_size=4, check_finite=True,
                       prefetch=prefetch))
    assert values(next(it)) == [0, 1, 3, 4]
    for _ in range(2):
        with pytest.raises(SpecMismatchError, match="NaN"):
            next(it)
        assert source.index == 5 and it.get_state()["position"] == 5


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_filtered_host_pipeline_counts_a_retried_skip_once(prefetch):
    source = Rows(RowsConfig(on_error="skip", max_skipped=1), bad={5}, nan={7})
    not2 = FilterOperator(predicate=lambda el: el.data["x"] != 2)
    it = iter(Pipeline(source=source, stages=[not2], batch_size=4, check_finite=True,
                       prefetch=prefetch))
    assert values(next(it), "x") == [0, 1, 3, 4]
    for _ in range(3):
        with pytest.raises(SpecMismatchError, match="NaN"):
            next(it)
        assert source.get_state()["current_index"] == 5
        assert source.get_state()["skipped"] == 0
    source.nan.clear()
    assert rest(it, "x") == [[6, 7, 8, 9], [10, 11, 12, 13], [14, 15]]


# ------------------------------------------------------------------ a stream
@dataclass(frozen=True)
class StreamConfig(StructuralConfig):
    num_records: int = 12


class Stream(DataSourceModule):
    """A forward-only stream (``get_batch`` and ``restart``); ``nan`` records hold NaN."""

    def __init__(self, config: StreamConfig, nan=()) -> None:
        super().__init__(config)
        self.nan = set(nan)
        self.opened = 0
        self._rows: Any = None

    def restart(self, epoch: int) -> None:
        self.opened += 1
        self._rows = iter(range(self.config.num_records))

    def get_batch(self, batch_size: int):
        if self._rows is None:
            self.restart(self.epoch)
        ids = list(itertools.islice(self._rows, batch_size))
        if not ids:
            return None
        return {"x": np.asarray([np.nan if i in self.nan else i for i in ids], np.float32)}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), np.float32)}


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stream_reads_the_failed_batch_again(prefetch):
    source = Stream(StreamConfig(), nan={6})
    pipeline = Pipeline(source=source, stages=[], batch_size=4, check_finite=True,
                        prefetch=prefetch)
    it = iter(pipeline)
    assert values(next(it), "x") == [0, 1, 2, 3]
    for _ in range(2):
        with pytest.raises(SpecMismatchError, match="position 6 of epoch 0"):
            next(it)
        assert source.index == 4 and it.get_state()["position"] == 4
    source.nan.clear()
    assert rest(it, "x") == [[4, 5, 6, 7], [8, 9, 10, 11]]
