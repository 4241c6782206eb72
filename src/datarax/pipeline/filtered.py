"""A pass of a Pipeline whose stages hold a ``FilterOperator``: full batches of kept records.

The position is the epoch position just after the last kept record handed out, so the
state stays ``{epoch, position}`` and a resume is exact (docs/filtering.md, "Resume").
Indexed sources: :class:`FilteredDispatch` runs
:func:`~datarax.pipeline.filtered_step.filtered_step`, packing kept records into full
batches in one compiled program. Host sources and streams (the filter first):
:class:`~datarax.pipeline.driver_cursor.FilteredReads` reads ``batch_size - kept`` records
at a time, so the position after a batch is exactly past its last kept record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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
from datarax.pipeline.filtered_step import filtered_step, spec_key
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


#: one handed-out batch: (epoch positions it covers, batch, kept records, stable indices)
FilteredItem = tuple[int, Batch, int, Any]


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
        self.step = reuse.step(
            ("filtered", self.batch_size, self.group, at, self.fuse, read_spec, by_position),
            lambda: filtered_step(self.graphdef, self.batch_size, self.group, at, self.fuse,
                                  read_spec, by_position))
        self.post_step = None if self.post_graph is None else stage_step(self.post_graph[0])
        self.wide = position_dtype()
        check_positions(epoch, self.n, self.base + self.total + self.batch_size)

    def programs(self) -> list[tuple[Any, tuple[Any, ...]]]:
        """``(step, arguments)`` of the compiled programs a full group runs."""
        step, args = self._filtered_program()
        if self.post_graph is None:
            return [(step, args)]
        # a full batch as the filtered step returns it (zeros: only its signature counts)
        first = jax.eval_shape(step.jitted, *args)[0][0]
        batch = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), first)
        rows = np.zeros(self.batch_size, np.int32)
        return [(step, args), (self.post_step, (self.post_graph[1], batch, rows,
                                                self.epoch_arg, self.key))]

    def _filtered_program(self) -> tuple[Any, tuple[Any, ...]]:
        wide = self.wide
        return self.step, (self.state, self.inputs, wide(self.position), wide(self.total),
                           wide(self.base), self.epoch_arg, self.key)

    def served(self, item: FilteredItem) -> Served:
        """``item`` as the compiled driver hands it out (its rows: the kept records)."""
        covered, batch, count, rows = item
        return covered, batch, count, lambda: rows, True

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
        step, args = self._filtered_program()
        began = time.perf_counter()
        (batches, indices, kept, ends), timer = call_bound(step, self.reuse.bound, args)
        kept, ends, indices = int(kept), np.asarray(ends), np.asarray(indices)
        self.stats.seconds[timer] += time.perf_counter() - began
        size, items, before = self.batch_size, [], self.position
        for k, batch in enumerate(batches):
            count = min(size, kept - k * size)
            if count <= 0:
                break
            rows = indices[k]
            if count < size:
                batch, rows = cut_batch(batch, count), rows[:count]
            if self.post_step is not None:
                with self.stats.timer("stages"):
                    batch = self.post_step(self.post_graph[1], batch, rows, self.epoch_arg,
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
