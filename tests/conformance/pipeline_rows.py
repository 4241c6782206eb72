"""The pipeline-level rows: what a Pipeline does to an epoch, through the same checks.

The source table (rows.py) has one row per kind of source. These rows change the
records an epoch hands out instead — a ``FilterOperator`` stage, ``Pipeline.take``,
``skip`` and ``repeat`` — and go through the clauses that apply to them
(test_pipeline_table.py) with the resume checks of :mod:`datarax.testing`.

A filter row is an ordinary :class:`~datarax.testing.SourceRow`: its pipeline keeps the
records whose number is not a multiple of 3, and ``record_ids`` numbers the kept
records ``0 .. kept-1``. A take / skip / repeat row's ``make`` returns a
:class:`PassView`: every ``for`` loop over it is one ``pipeline.take(n)`` /
``skip(n)`` / ``repeat(k)`` iterator, so the resume checks save and restore that
iterator's own state (``get_state`` / ``set_state``, the "iterator" level).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import SourceRow
from datarax.typing import Batch

from rows import (
    N_FILTER_HOST,
    N_MEMORY,
    ShuffledStream,
    ShuffledStreamConfig,
    pipeline_over,
)

# Each filter row: records 0..15, 10 kept, in 3 batches of BATCH (more kept records
# than the largest fixed-size state leaf, the 9-value settings digest)
N_FILTER_MEMORY = 16
N_FILTER_STREAM = 16


def kept(n: int) -> int:
    """Records of ``0 .. n-1`` the rows' filter keeps (not a multiple of 3)."""
    return n - (n + 2) // 3


def kept_ids(values: Any) -> Any:
    """Kept record ``x`` (1, 2, 4, 5, 7, ...) as its number among the kept: 0, 1, 2, ..."""
    x = np.asarray(values)
    if (x % 3 == 0).any():
        raise AssertionError(f"the filter let through multiples of 3: {x.tolist()}")
    return x - x // 3 - 1


def not_multiple_of_3(field: str) -> Callable[[], FilterOperator]:
    return lambda: FilterOperator(predicate=lambda el: el.data[field] % 3 != 0)


# ------------------------------------------------------------------ filter rows
def _filter_indexed(root: Path) -> SourceRow:
    """A shuffled MemorySource of 16 records: the filter runs in the compiled step."""
    keep = not_multiple_of_3("x")

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        x = np.arange(N_FILTER_MEMORY, dtype=np.int32)
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=7),
                              {"x": x, "y": np.stack([x, -x], 1).astype(np.float32)})
        return pipeline_over(source, shard_index, shard_count, [keep(), *stages])

    return SourceRow("filter_indexed", make, kept(N_FILTER_MEMORY),
                     lambda b: kept_ids(b["x"]), shuffled=True, kind="INDEXED")


def _filter_host(root: Path) -> SourceRow:
    """NpySource (read-ahead threads) over 16 records: the filter runs on the records as
    they are read."""
    from datarax.sources import NpySource, NpySourceConfig

    keep = not_multiple_of_3("id")
    path = root / "filter_host.npy"  # 0 .. N_FILTER_HOST - 1 (rows.write_table_data)

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        config = NpySourceConfig(paths={"id": str(path)}, shuffle=True, seed=9)
        source = NpySource(config, num_threads=2)
        return pipeline_over(source, shard_index, shard_count, [keep(), *stages])

    return SourceRow("filter_host", make, kept(N_FILTER_HOST), lambda b: kept_ids(b["id"]),
                     shuffled=True, kind="HOST")


def _filter_stream(root: Path) -> SourceRow:
    """A forward-only stream (a new order each pass) with the filter as its first stage."""
    keep = not_multiple_of_3("id")

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        source = ShuffledStream(ShuffledStreamConfig(num_records=N_FILTER_STREAM))
        return pipeline_over(source, shard_index, shard_count, [keep(), *stages])

    return SourceRow("filter_stream", make, kept(N_FILTER_STREAM),
                     lambda b: kept_ids(b["id"]), shuffled=True, kind="STREAM")


def _filter_shuffle_buffer(root: Path) -> SourceRow:
    """The stream of 16 records behind a ShuffleBufferSource (windows of 5), filtered."""
    from datarax.sources import ShuffleBufferSource

    keep = not_multiple_of_3("id")

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        stream = ShuffledStream(ShuffledStreamConfig(num_records=N_FILTER_STREAM))
        source = ShuffleBufferSource(stream, buffer_size=5, seed=6)
        return pipeline_over(source, shard_index, shard_count, [keep(), *stages])

    return SourceRow("filter_shuffle_buffer", make, kept(N_FILTER_STREAM),
                     lambda b: kept_ids(b["id"]), shuffled=True, kind="STREAM")


# -------------------------------------------------------- take / skip / repeat
class PassLoop:
    """One ``for`` loop over a :class:`PassView`: the iterator ``view.open(pipeline)``
    returns, opened at the first ``next``.

    Its state is the wrapped iterator's own state (``"inner"``) — or, before it opened
    and once it ended, the pipeline's state (``"pipeline"``): the next loop opens a new
    one there — with the view's loop count and batches into the loop, which the resume
    checks compare with where they expect to be.
    """

    def __init__(self, view: PassView) -> None:
        self.view = view
        self.inner: Any = None
        self.ended = False

    def __iter__(self) -> PassLoop:
        return self

    def __next__(self) -> Batch:
        view = self.view
        if self.ended:
            raise StopIteration
        if self.inner is None:
            self.inner = view.open(view.pipeline)
        try:
            batch = next(self.inner)
        except StopIteration:
            self.ended = True
            if view.pipeline.position > 0:  # a take that stopped inside its pass: as
                # after a break, the next loop is the next epoch; say so in the state
                view.pipeline.source.seek(view.pipeline.epoch + 1, 0)
            view.epoch, view.position = view.epoch + 1, 0
            raise
        view.position += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"epoch": self.view.epoch, "position": self.view.position}
        if self.inner is None or self.ended:
            state["pipeline"] = self.view.pipeline.get_state()
        else:
            state["inner"] = self.inner.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        view = self.view
        if "inner" in state:
            self.inner = view.resume(view.pipeline, state["inner"])
        else:
            view.pipeline.set_state(state["pipeline"])
            self.inner = None
        self.ended = False
        view.epoch, view.position = int(state["epoch"]), int(state["position"])

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class PassView:
    """A pipeline read through ``take`` / ``skip`` / ``repeat``, as the resume checks
    read a pipeline: each ``for`` loop is one ``open(pipeline)`` iterator, and
    ``resume(pipeline, state)`` rebuilds one from its saved state. ``epoch`` counts the
    loops, ``position`` the batches of the current one."""

    def __init__(self, pipeline: Pipeline, open: Callable[[Pipeline], Any],
                 resume: Callable[[Pipeline, Any], Any]) -> None:
        self.pipeline, self.open, self.resume = pipeline, open, resume
        self.epoch = self.position = 0

    @property
    def source(self) -> Any:
        return self.pipeline.source

    def __iter__(self) -> PassLoop:
        return PassLoop(self)


def _restored(make: Callable[[Pipeline], Any]) -> Callable[[Pipeline, Any], Any]:
    def resume(pipeline: Pipeline, state: Any) -> Any:
        iterator = make(pipeline)
        iterator.set_state(state)
        return iterator

    return resume


def take_view(pipeline: Pipeline, n: int = 2) -> PassView:
    """Each loop: ``pipeline.take(n)`` (the first ``n`` batches of the next epoch)."""
    return PassView(pipeline, lambda p: p.take(n), _restored(lambda p: p.take(n)))


def skip_view(pipeline: Pipeline, n: int = 1) -> PassView:
    """Each loop: ``pipeline.skip(n)`` (the next epoch from its batch ``n`` on)."""
    return PassView(pipeline, lambda p: p.skip(n), _restored(iter))


def repeat_view(pipeline: Pipeline, k: int = 2) -> PassView:
    """Each loop: ``pipeline.repeat(k)`` (``k`` epochs in a row)."""
    return PassView(pipeline, lambda p: p.repeat(k), _restored(lambda p: p.repeat(k)))


def _viewed(base: Callable[[Path], SourceRow], view: Callable[[Pipeline], PassView],
            name: str) -> Callable[[Path], SourceRow]:
    """``base``'s pipeline read through ``view``."""

    def build(root: Path) -> SourceRow:
        row = base(root)

        def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> PassView:
            return view(row.make(shard_index, shard_count, stages))

        return SourceRow(name, make, row.num_records, row.record_ids, shuffled=row.shuffled,
                         kind=row.kind)

    return build


def _memory(root: Path) -> SourceRow:
    """A shuffled MemorySource of 11 records: 3 batches an epoch."""

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        x = np.arange(N_MEMORY, dtype=np.int32)
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=7), {"x": x})
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("memory", make, N_MEMORY, lambda b: b["x"], shuffled=True, kind="INDEXED")


def _table_row(name: str) -> Callable[[Path], SourceRow]:
    def build(root: Path) -> SourceRow:
        from rows import ROWS

        return ROWS[name][0](root)

    return build


_npy = _table_row("npy_shards")


# Rows whose every clause runs (as the source table's rows do, less shards: see
# test_pipeline_table.py): name -> builder.
FILTER_ROWS: dict[str, Callable[[Path], SourceRow]] = {
    "filter_indexed": _filter_indexed,
    "filter_host": _filter_host,
    "filter_stream": _filter_stream,
    "filter_shuffle_buffer": _filter_shuffle_buffer,
}

# Rows checked through their iterator's own state: name -> builder.
VIEW_ROWS: dict[str, Callable[[Path], SourceRow]] = {
    "take_indexed": _viewed(_memory, take_view, "take_indexed"),
    "skip_indexed": _viewed(_memory, skip_view, "skip_indexed"),
    "repeat_indexed": _viewed(_memory, repeat_view, "repeat_indexed"),
    "take_host": _viewed(_npy, take_view, "take_host"),
    "skip_host": _viewed(_npy, skip_view, "skip_host"),
    "repeat_host": _viewed(_npy, repeat_view, "repeat_host"),
    "take_filtered": _viewed(_filter_indexed, take_view, "take_filtered"),
    "skip_filtered": _viewed(_filter_host, skip_view, "skip_filtered"),
    "repeat_filtered": _viewed(_filter_host, repeat_view, "repeat_filtered"),
    "take_interleave": _viewed(_table_row("interleave"), take_view, "take_interleave"),
    "repeat_shuffle_buffer": _viewed(_table_row("shuffle_buffer"), repeat_view,
                                     "repeat_shuffle_buffer"),
}

# The rows and clauses of the default run; the rest run with -m slow.
DEFAULT_FILTER_CLAUSES = ("pipeline", "source", "epochs", "spec", "kind", "nnx_small")
DEFAULT_VIEW_ROWS = ("take_indexed", "skip_indexed", "repeat_indexed")
