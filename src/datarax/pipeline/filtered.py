"""A pass of a Pipeline whose stages hold a ``FilterOperator``: full batches of kept records.

The position is the epoch position just after the last kept record handed out, so the
state stays ``{epoch, position}`` and a resume is exact (docs/filtering.md, "Resume").
Indexed sources: :class:`FilteredDispatch` runs
:func:`~datarax.pipeline.filtered_step.filtered_step`, packing kept records into full
batches in one compiled program; where the filter comes first over a source read by
position (:func:`two_phase`), in two: a pass's verdicts once
(:func:`~datarax.pipeline.filtered_step.choose_step`), then each batch from its kept
positions (:func:`~datarax.pipeline.filtered_step.kept_step`). Host sources and streams
(the filter first): :class:`~datarax.pipeline.driver_cursor.FilteredReads` reads
``batch_size - kept`` records at a time, so the position after a batch is exactly past its
last kept record.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.errors import ConfigError, StateError
from datarax.core.indexed import TRACER_ERRORS
from datarax.core.operator import RecordFilter, all_per_record
from datarax.core.reading import reading_of
from datarax.core.spec import TextSpec, checked_spec, has_text
from datarax.core.stages import filtered
from datarax.host.counts import count_words
from datarax.pipeline.ahead import DispatchAhead, run_ahead
from datarax.pipeline.devices import place_batch
from datarax.pipeline.dispatch import (
    GROUP_MIN_BATCHES, Served, call_bound, check_positions, cut_batch, group_size,
    pass_arguments, position_dtype,
)
from datarax.pipeline.filtered_step import choose_step, filtered_step, kept_step, spec_key
from datarax.pipeline.plan import PassContext, PipelinePlan, passed
from datarax.pipeline.steps import stage_step
from datarax.typing import Batch


def check_filter(source: Any, stages: Sequence[Any], at: int, spec_after: Any,
                 plan: PipelinePlan | None = None) -> None:
    """Refuse, at build time, what a filtered pipeline cannot run (naming the stage);
    ``spec_after(stages)``: the per-record spec after ``stages``."""
    filt: RecordFilter = stages[at]
    where = f"Pipeline stage {at}"
    split = plan.placement.local_split if plan is not None and plan.placement else 1
    if split > 1 and not plan.drop_remainder:  # type: ignore[union-attr]
        raise ConfigError(
            f"{where} (FilterOperator '{filt.name}') with sharding= over {split} devices: "
            "a filtered epoch's last batch holds however many records are kept, which may "
            f"not split over the {split} devices. Set drop_remainder=True."
        )
    reading = plan.reading if plan is not None else reading_of(source)
    if not reading.compiled:
        if at != 0:
            raise ConfigError(
                f"{where} (FilterOperator '{filt.name}') comes after other stages, over a "
                f"{reading.kind_name} source ({type(source).__name__}): there the "
                "predicate runs as records are read, before the batch is built. Make the "
                "FilterOperator the first stage."
            )
    else:
        if source.has_host_fields():  # first: on_host=True cannot read them here either
            raise ConfigError(
                f"{where} (FilterOperator '{filt.name}'): {type(source).__name__} keeps text "
                "fields on the host, which the compiled filter cannot read. Read it as a "
                "host source, where the filter runs on the records as they are read (text "
                "included): ConcatSource([source]), or a streaming source "
                "(HFStreamingSource, TFDS streaming)."
            )
        if filt.on_host:
            raise ConfigError(
                f"{where} (FilterOperator '{filt.name}') has on_host=True, but "
                f"{type(source).__name__} is an indexed source, read in one compiled step: "
                "write the predicate with jax.numpy and leave on_host off."
            )
    # the first stage sees the source's records: its spec, without tracing zero stages
    spec = checked_spec(source) if at == 0 else spec_after(list(stages[:at]))
    if filt.on_host or has_text(spec):
        probe_python_predicate(filt, spec, where)
        return  # and checked on each record as it is read
    try:
        filt.check_output(spec, where)
    except ConfigError as err:
        if reading.compiled or not isinstance(err.__cause__, TRACER_ERRORS):
            raise
        raise ConfigError(
            f"{err}\nOver a {reading.kind_name} source, FilterOperator(predicate=fn, "
            "on_host=True) calls fn in plain Python on each record's numpy values instead."
        ) from err.__cause__


def probe_python_predicate(filt: RecordFilter, spec: Any, where: str) -> None:
    """Call a Python predicate once on a record of zeros shaped like the source's, and
    refuse it now unless it returns one boolean (a failure is left to the real records)."""
    def zeros(s: Any) -> Any:
        if isinstance(s, TextSpec):
            if s.shape:
                raise LookupError  # text arrays: no probe
            return [""]
        return np.zeros((1, *s.shape), s.dtype)

    try:
        record = jax.tree.map(zeros, spec, is_leaf=lambda s: isinstance(s, TextSpec))
    except LookupError:
        return
    try:
        with np.errstate(all="ignore"):  # zeros may divide by zero: no warning for a probe
            filt.keep_records(record, f"{where}, called when the Pipeline is built on a "
                                      "record of zeros and empty strings shaped like the "
                                      "source's")
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - it may need real data: checked on each record read
        return


# ------------------------------------------------------------------ indexed


#: one handed-out batch: (epoch positions it covers, batch, kept records, its stable
#: indices when called)
FilteredItem = tuple[int, Batch, int, Callable[[], Any]]
#: phase one reads a pass's records in chunks of at most these many bytes, or records
CHOOSE_BYTES = 16 * 1024 * 1024
CHOOSE_RECORDS = 8192
#: passes over more records keep the one-phase path: phase one runs before a pass's first
#: batch (and again after each restore), and its mask and positions grow with the pass
CHOOSE_MOST_RECORDS = 2**20


def two_phase(stages: Sequence[Any], at: int, read_spec: Any, by_position: bool) -> bool:
    """Whether a filtered pass runs in two phases: the filter first, per record (its
    verdict on a record the same in a chunk of any size), over numeric records read by
    position (a record the same whatever run it is read in)."""
    return at == 0 and by_position and read_spec is not None and bool(
        getattr(stages[0], "per_record", False))


def choose_chunks(read_spec: Any, total: int) -> tuple[int, int]:
    """``(chunk, chunks)``: phase one's reads over a pass of ``total`` records.

    >>> import numpy as np
    >>> choose_chunks((None, (((32, 32, 3), np.dtype(np.uint8).str),)), 50_000)
    (5461, 10)
    """
    size = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in read_spec[1])
    chunk = max(1, min(total, CHOOSE_RECORDS, CHOOSE_BYTES // max(size, 1)))
    return chunk, max(1, -(-total // chunk))


class FilteredDispatch:
    """The batches of one filtered pass of an indexed source, from the source's position."""

    def __init__(self, context: PassContext, epoch: int, at: int) -> None:
        source = context.source
        refuse_resplit(context, epoch)
        self.context, self.source, self.plan = context, source, context.plan
        self.stats, self.epoch, self.at = context.stats, epoch, at
        self.batch_size = context.plan.batch_size
        stages = list(context.stages)
        post = stages[at + 1:]
        self.fuse = all_per_record(post)
        self.post_graph = None if self.fuse or not post else nnx.split(
            [passed] * at + [filtered] + post
        )
        self.graphdef, state = context.session.pass_reuse.split((source, stages))
        self.reuse = reuse = context.session.pass_reuse
        self.inputs, self.state, self.key, self.epoch_arg = pass_arguments(
            context, epoch, self.graphdef, state, np.int32(epoch))
        self.n = len(source)
        lo = source.shard.bounds(self.n)[0]
        self.base = epoch * self.n + lo
        self.total = source.epoch_size() or 0
        # a batch_size past the epoch's records packs chunks of the records alone
        self.batch_size = min(self.batch_size, max(self.total, 1))
        self.position = source.index
        long_pass = self.total - self.position >= GROUP_MIN_BATCHES * self.batch_size
        self.group = group_size(self.batch_size) if long_pass else 1
        self.done = False
        read_spec = spec_key(checked_spec(source)) if at == 0 else None
        by_position = context.reading.reads_by_position
        self.wide = position_dtype()
        check_positions(epoch, self.n, self.base + self.total + self.batch_size)
        self.choose = self.kept_step = self.chosen = None  # two phases: chosen, kept positions
        self.taken = 0  # of chosen, handed to batches
        if two_phase(stages, at, read_spec, by_position) and self.total <= CHOOSE_MOST_RECORDS:
            chunk, chunks = choose_chunks(read_spec, self.total)
            if jax.config.jax_enable_x64 or self.base + chunk * chunks < 2**31:
                self.choose = reuse.step(("choose", chunk, chunks),
                                         lambda: choose_step(self.graphdef, chunk, chunks))
                self.kept_step = reuse.step(
                    ("kept", self.batch_size, self.group, self.fuse),
                    lambda: kept_step(self.graphdef, self.batch_size, self.group, self.fuse))
        self.step = None if self.choose is not None else reuse.step(
            ("filtered", self.batch_size, self.group, at, self.fuse, read_spec, by_position),
            lambda: filtered_step(self.graphdef, self.batch_size, self.group, at, self.fuse,
                                  read_spec, by_position))
        self.post_step = None if self.post_graph is None else stage_step(self.post_graph[0])

    def programs(self) -> list[tuple[Any, tuple[Any, ...]]]:
        """``(step, arguments)`` of the compiled programs a full group runs."""
        if self.choose is not None:
            found = [(self.choose, self._choose_args()),
                     (self.kept_step, self._kept_args(np.zeros(self.group * self.batch_size,
                                                               self.wide)))]
        else:
            found = [self._filtered_program()]
        if self.post_graph is None:
            return found
        # a full batch as the filtered step returns it (zeros: only its signature counts)
        step, args = found[-1]
        first = jax.eval_shape(step.jitted, *args)[0][0]
        batch = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), first)
        rows = np.zeros(self.batch_size, np.int32)
        return [*found, (self.post_step, (self.post_graph[1], batch, rows,
                                          self.epoch_arg, self.key))]

    def _choose_args(self) -> tuple[Any, ...]:
        wide = self.wide
        return (self.state, self.inputs, wide(self.position), wide(self.total),
                wide(self.base), self.epoch_arg, self.key)

    def _kept_args(self, positions: np.ndarray) -> tuple[Any, ...]:
        return (self.state, self.inputs, positions, self.wide(self.base), self.epoch_arg,
                self.key)

    def _filtered_program(self) -> tuple[Any, tuple[Any, ...]]:
        wide = self.wide
        return self.step, (self.state, self.inputs, wide(self.position), wide(self.total),
                           wide(self.base), self.epoch_arg, self.key)

    def served(self, item: FilteredItem) -> Served:
        """``item`` as the compiled driver hands it out (its rows: the kept records)."""
        covered, batch, count, rows = item
        return covered, batch, count, rows, True

    def counted(self, covered: int, count: int) -> None:
        self.stats.count_filtered(count, covered - count)  # the predicate's verdicts

    def finished(self) -> None:
        # the records past the last batch handed out were all dropped
        self.stats.count_filtered(0, max(self.total - self.source.index, 0))

    def start(self, depth: int) -> DispatchAhead | None:
        """A worker dispatching ``depth`` groups ahead (None: ``depth`` 0), the last
        pass's parked one where it can."""
        return run_ahead(self.dispatch_some, depth, self.context.session.pass_reuse.parked())

    def dispatch_some(self) -> list[FilteredItem] | None:
        """The next group's batches (fewer at the pass's end); None when none is left."""
        if self.done or self.position >= self.total:
            return None
        if self.choose is not None:
            return self._dispatch_chosen()
        step, args = self._filtered_program()
        began = time.perf_counter()
        (batches, indices, kept, ends), timer = call_bound(step, self.reuse.bound, args)
        kept, ends, indices = int(kept), np.asarray(ends), np.asarray(indices)
        self.stats.seconds[timer] += time.perf_counter() - began
        return self._items(batches, kept, ends, lambda k: indices[k])

    def _dispatch_chosen(self) -> list[FilteredItem] | None:
        """Two phases: the pass's kept positions chosen once, then the next group's
        batches read from them; an ending as :func:`filtered_step`'s."""
        size, whole = self.batch_size, self.group * self.batch_size
        began = time.perf_counter()
        if self.chosen is None:
            mask, timer = call_bound(self.choose, self.reuse.bound, self._choose_args())
            self.chosen = np.flatnonzero(np.asarray(mask)[:self.total]).astype(self.wide)
            self.stats.seconds[timer] += time.perf_counter() - began
            began = time.perf_counter()
        take = self.chosen[self.taken:self.taken + whole]
        kept = len(take)
        if not kept:  # the rest of the pass dropped
            self.done, self.position = True, self.total
            return None
        self.taken += kept
        positions = np.zeros(whole, self.wide)
        positions[:kept] = take
        (batches, indices), timer = call_bound(self.kept_step, self.reuse.bound,
                                               self._kept_args(positions))
        self.stats.seconds[timer] += time.perf_counter() - began
        ends = [int(take[k * size + size - 1]) + 1 if (k + 1) * size <= kept else self.total
                for k in range(self.group)]
        return self._items(batches, kept, ends, lambda k: np.asarray(indices)[k])

    def _items(self, batches: Any, kept: int, ends: Any,
               rows_of: Callable[[int], Any]) -> list[FilteredItem] | None:
        """The group's handed-out batches: ``kept`` records, batch ``k`` ending at epoch
        position ``ends[k]`` with stable indices ``rows_of(k)``."""
        size, items, before = self.batch_size, [], self.position
        for k, batch in enumerate(batches):
            count = min(size, kept - k * size)
            if count <= 0:
                break
            if count < size:
                batch = cut_batch(batch, count)
            rows = functools.partial(_head, rows_of, k, count)
            if self.post_step is not None:
                with self.stats.timer("stages"):
                    batch = self.post_step(self.post_graph[1], batch, rows(), self.epoch_arg,
                                           self.key)
            # never handed out (a short batch under drop_remainder)
            dropped = count < self.plan.batch_size and self.plan.drop_remainder
            if not self.plan.check_finite and not dropped:
                batch = place_batch(self.plan, self.stats, batch, before, self.epoch)
            items.append((int(ends[k]) - before, batch, count, rows))
            before = int(ends[k])
        if kept < self.group * size:
            self.done = True  # the pass's end was reached
        self.position = before if items else self.total
        return items or None


def _head(rows_of: Callable[[int], Any], k: int, count: int) -> Any:
    """The first ``count`` of ``rows_of(k)``."""
    return rows_of(k)[:count]


def refuse_resplit(context: PassContext, epoch: int) -> None:
    """Refuse a filtered pass of a re-split epoch (what is left is not known)."""
    resplit = context.resplit(epoch)
    if resplit is None:
        return
    saved = resplit.history[-1][0]
    shard = context.source.shard
    raise StateError(
        f"Pipeline with a FilterOperator: the state restored into epoch {epoch} was saved "
        f"by {count_words(saved, 'process', 'processes')}, and this pipeline runs as shard "
        f"{shard.index} of "
        f"{shard.count}. A filtered epoch cannot be re-split over another number of "
        "processes (each process's position counts the records it filtered, so what is "
        f"left is unknown). Restore the state on {count_words(saved, 'process', 'processes')}, or "
        "start the next "
        f"epoch here: pipeline.source.seek({epoch + 1}, 0).",
        field="shard",
    )
