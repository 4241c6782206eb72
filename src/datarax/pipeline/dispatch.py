"""Indexed batches computed from positions: what one pass dispatches.

:class:`IndexedDispatch` computes and places one pass's batches; it never moves the
source's position (the iterator does, as it hands batches out).
"""

from __future__ import annotations

import collections
import functools
import time
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datarax.core.batch import concat_batches, head_rows
from datarax.core.user_jax import jax_debugging
from datarax.core.keys import for_stages, step_keys
from datarax.core.operator import all_per_record
from datarax.core.dtypes import is_host_leaf
from datarax.core.indexed import position_dtype
from datarax.core.spec import checked_spec, record_bytes as spec_record_bytes, refuse_declared_64bit
from datarax.core.stages import apply_stages, stage_positions
from datarax.pipeline.ahead import DispatchAhead, run_ahead
from datarax.pipeline.devices import place_batch, stage_context, stage_device
from datarax.pipeline.plan import PassContext
from datarax.pipeline.steps import grouped_step, indexed_step, runs_step
from datarax.typing import Batch

Item = tuple[int, Batch, int]  # (records, batch, global start position)
#: (positions covered, batch, records, stable indices (lazy), whether filtered)
Served = tuple[int, Batch, int, Callable[[], Any], bool]
_INT32_MAX = 2**31 - 1
#: small or narrow batches are computed several per dispatch, within these limits
GROUP_BELOW = 128
GROUP_RECORDS = 512
GROUP_BYTES = 512 * 1024
MAX_GROUP = 16
#: ... in passes long enough that saved dispatches repay compiling the grouped program
GROUP_MIN_BATCHES = 512
#: a group read as one gather (no stages) goes up to this many times those limits
ONE_READ_SCALE = 2


def group_size(batch_size: int, record_bytes: int = 0, one_read: bool = False) -> int:
    """How many consecutive batches of ``batch_size`` one dispatch computes, for records
    of ``record_bytes`` bytes (0: unknown); ``one_read``: the group is one read.

    >>> group_size(32), group_size(100), group_size(256), group_size(256, 132)
    (16, 5, 1, 15)
    >>> group_size(256, 132, one_read=True)
    31
    """
    scale = ONE_READ_SCALE if one_read else 1
    by_records = GROUP_RECORDS * scale // batch_size if batch_size < GROUP_BELOW else 1
    by_bytes = GROUP_BYTES * scale // (batch_size * record_bytes) if record_bytes > 0 else 1
    return max(1, min(MAX_GROUP * scale, max(by_records, by_bytes)))


def check_positions(epoch: int, n: int, end: int) -> None:
    """Refuse global record positions up to ``end`` (epoch ``epoch`` of an ``n``-record
    source) past what int32 holds, with ``jax_enable_x64`` off."""
    if end > _INT32_MAX and not jax.config.jax_enable_x64:
        raise OverflowError(
            f"epoch {epoch} of a {n}-record source passes 2**31 global record positions; "
            "enable jax_enable_x64 to continue."
        )


def record_bytes(source: Any) -> int:
    """Bytes of one record of ``source``'s spec (0 if unknown)."""
    try:
        return spec_record_bytes(checked_spec(source))
    except Exception:  # noqa: BLE001 - a spec that cannot say: group by records only
        return 0


def pass_arguments(context: PassContext, epoch: int, graphdef: Any, state: Any,
                   extra: Any) -> tuple[Any, Any, Any, Any]:
    """``(inputs, state, key, extra)`` of pass ``epoch``'s compiled calls, placed (or
    reused) by the session's :class:`~datarax.pipeline.pass_reuse.PassReuse`; on the
    CPU with ``stages_on="host"``."""
    device = stage_device(context.plan)
    inputs = context.source.epoch_step_inputs(epoch)
    if device is not None:
        inputs = context.session.host_inputs.on(inputs, device)[0]
    keys = step_keys(*context.key_pair(), stage_positions(context.stages), epoch)
    return (inputs, *context.session.pass_reuse.constants(graphdef, state, keys, extra,
                                                          device=device, inputs=inputs))


#: the compiled steps called at least once in this process
_CALLED: weakref.WeakSet[Any] = weakref.WeakSet()


def call_timer(step: Any) -> str:
    """``"compile"`` for ``step``'s first call in this process, ``"step"`` after."""
    timer = "step" if step in _CALLED else "compile"
    _CALLED.add(step)
    return timer

def call_bound(step: Any, bound: dict[Any, Any], args: tuple[Any, ...]) -> tuple[Any, str]:
    """``step(*args)`` and its timer; after the first call its executable (kept in
    ``bound``) is called directly: a pass's calls share one signature, so no lookup."""
    found = bound.get(step)
    if found is not None and not jax_debugging():  # there: step(*args) runs its jax.jit
        return found(*args), "step"
    out = step(*args)
    bound[step] = step.executable(*args)
    return out, call_timer(step)


#: vectorized grouped steps whose first call raised (computed by a loop instead)
_NOT_VECTORIZED: weakref.WeakSet[Any] = weakref.WeakSet()


class IndexedDispatch:
    """The batches of one pass of an indexed source, computed from positions.

    :meth:`dispatch_one` returns ``(records, batch, start)`` for the next batch, or None
    at the pass's end. Small batches of a long pass are computed :func:`group_size` at a
    time (each exactly as alone); :meth:`dispatch_some` returns a whole group.
    """

    def __init__(self, context: PassContext, epoch: int) -> None:
        source = context.source
        stages = list(context.stages)
        refuse_declared_64bit(source)
        self.source = source
        self.plan = context.plan
        self.stats = context.stats
        self.epoch = epoch
        self.batch_size = context.plan.batch_size
        # text kept on the host joins the gathered fields by index; stages then run on the host
        self.host_fields = source.has_host_fields()
        self.host_stages = stages if self.host_fields else []
        self.graphdef, state = context.session.pass_reuse.split(
            (source, [] if self.host_fields else stages))
        self.exact_short = not self.host_fields and not all_per_record(stages)
        self.n = len(source)  # type: ignore[arg-type]
        self.lo = source.shard.bounds(self.n)[0]
        self.resplit = context.resplit(epoch)
        size = source.epoch_size() or 0
        if self.resplit is not None:  # this epoch's share is re-split runs
            size = self.resplit.size(self.n)
        self.dispatched = source.index
        self.total = self.plan.end(size, self.dispatched)
        # a batch_size past the pass's records computes no rows it would only cut off
        self.batch_size = min(self.batch_size, max(size, 1))
        first = self._first_position()
        self.reuse = context.session.pass_reuse
        self.inputs, self.state, self.key, (self.epoch_arg, placed_first) = pass_arguments(
            context, epoch, self.graphdef, state, (np.int32(epoch), first))
        self.step = self._step(self.batch_size)
        simple = not self.host_fields and self.resplit is None
        long_pass = (self.total - self.dispatched) >= GROUP_MIN_BATCHES * self.batch_size
        self.by_position = context.reading.reads_by_position
        one_read = not stages and self.by_position
        self.group = (group_size(self.batch_size, record_bytes(source), one_read)
                      if simple and long_pass else 1)
        # vmap only per-record stages: faster side by side; a bare gather and batch-level
        # stages run one after the other (measured: docs/benchmarks.md)
        self.vectorized = bool(stages) and all_per_record(stages)
        self.grouped = self._grouped_step() if self.group > 1 else None
        self.made: collections.deque[Item] = collections.deque()  # computed, not yet taken
        self.bound: dict[Any, Any] = self.reuse.bound
        # where the last call said the next batch starts: (position, it on the device)
        self.after: tuple[int, Any] | None = (
            None if first is None else (int(first), placed_first))

    def _first_position(self) -> Any:
        """The position of the pass's first call (None: a re-split share, or overflowing)."""
        start = self._next_start()
        if self.resplit is not None or (
                not jax.config.jax_enable_x64 and start + self.batch_size > _INT32_MAX):
            return None
        return position_dtype()(start)

    def _next_start(self) -> int:
        """The global position of the next record this pass dispatches."""
        return self.epoch * self.n + self.lo + self.dispatched

    def _step(self, size: int) -> Any:
        """The indexed step of batches of ``size`` (the last pass's, where it applies)."""
        return self.reuse.step(("indexed", size), lambda: indexed_step(self.graphdef, size))

    def _grouped_step(self) -> Any:
        return self.reuse.step(
            ("grouped", self.batch_size, self.group, self.vectorized, self.by_position),
            lambda: grouped_step(self.graphdef, self.batch_size, self.group,
                                 vectorized=self.vectorized, by_position=self.by_position))

    def programs(self) -> list[tuple[Any, tuple[Any, ...]]]:
        """``(step, arguments)`` of each program this pass will call (to compile ahead);
        empty for a re-split share."""
        if self.resplit is not None:
            return []
        args = (self.state, self.inputs, position_dtype()(self.epoch * self.n + self.lo),
                self.epoch_arg, self.key)
        short = (self.total - self.dispatched) % self.batch_size if self.exact_short else 0
        found = [(self.grouped, args)] if self.grouped is not None else []
        if self.grouped is None or short:
            found.append((self.step, args))
        if short:
            found.append((self._step(short), args))
        return found

    def _timed(self, step: Any, where: Any, span: int | None = None) -> Any:
        """``step`` called at position ``where`` with the pass's constants, timed.

        A step given ``span`` returns the next position on the device; the next call at
        that position reuses it, so no position is copied to the device per batch."""
        began = time.perf_counter()
        at, after = where, self.after
        if step in self.bound and span is not None and after is not None and (
                after[0] == int(where)):
            where = after[1]  # the position the last call left on the device
        out, timer = call_bound(step, self.bound,
                                (self.state, self.inputs, where, self.epoch_arg, self.key))
        self.stats.seconds[timer] += time.perf_counter() - began
        if span is None:
            return out
        out, placed = out
        self.after = (int(at) + span, placed)
        return out

    def _grouped_batches(self, start: Any) -> tuple[Batch, ...]:
        """The next group's batches: vectorized, or a loop where ``jax.vmap`` raised."""
        span = self.group * self.batch_size
        if self.vectorized and self.grouped not in _CALLED:
            if self.grouped not in _NOT_VECTORIZED:
                try:
                    return self._timed(self.grouped, start, span)
                except Exception:  # noqa: BLE001 - not batchable: the loop computes it (or re-raises)
                    _NOT_VECTORIZED.add(self.grouped)
            self.vectorized = False
            self.grouped = self._grouped_step()
        return self._timed(self.grouped, start, span)

    def served(self, item: Item) -> Served:
        """``item`` as the driver hands it out: unfiltered, it covers its records."""
        count, batch, start = item
        size = self.batch_size
        return count, batch, count, lambda: self.source.record_indices_at(start, size, None), False

    def counted(self, covered: int, count: int) -> None:
        """Nothing to count unfiltered."""

    def finished(self) -> None:
        """The pass has no more batches: nothing to count unfiltered."""

    def start(self, depth: int) -> DispatchAhead | None:
        """A worker preparing batches ``depth`` dispatches ahead (the last pass's parked
        one where it can), or None: dispatched on the consumer's thread."""
        parked = self.reuse.parked()
        if self.host_fields:
            if parked is not None:
                parked.stop()
            return None
        return run_ahead(self.dispatch_some, depth * self.group, parked)

    def _placed(self, batch: Batch, at: int) -> Batch:
        if self.plan.check_finite:  # checked on the host first, then placed
            return batch
        return place_batch(self.plan, self.stats, batch, at, self.epoch)

    def dispatch_some(self) -> list[Item] | None:
        """The next batch of the pass, or every batch of its next group; None at the end."""
        first = self.dispatch_one()
        if first is None:
            return None
        rest = list(self.made)
        self.made.clear()
        return [first, *rest]

    def dispatch_one(self) -> Item | None:
        """Compute the next batch of the pass; None when the pass has no more."""
        if self.made:
            return self.made.popleft()
        if self.dispatched >= self.total:
            return None
        start = self._next_start()
        whole = self.group * self.batch_size
        left = self.total - self.dispatched
        # the last group reuses the grouped program, cut, unless batch-level stages need
        # the short batch's exact size
        if self.group > 1 and (left >= whole or not (self.exact_short and left % self.batch_size)):
            check_positions(self.epoch, self.n, start + whole)
            batches = self._grouped_batches(position_dtype()(start))
            for i, batch in enumerate(batches):
                count = min(self.batch_size, left - i * self.batch_size)
                if count <= 0:
                    break
                if count < self.batch_size:
                    batch = cut_batch(batch, count)
                at = self.dispatched + i * self.batch_size
                self.made.append((count, self._placed(batch, at), start + i * self.batch_size))
            self.dispatched += min(whole, left)
            return self.made.popleft()
        check_positions(self.epoch, self.n, start + self.batch_size)
        count = min(self.batch_size, self.total - self.dispatched)
        # Batch-level stages must see exactly the batch's records: the short last batch
        # then runs at its own size; per-record stages run padded and are cut after.
        exact = count < self.batch_size and self.exact_short
        step = self._step(count) if exact else self.step
        dtype = position_dtype()
        where: Any = dtype(start)
        pieces = None
        if self.resplit is not None:
            pieces = self.resplit.take(self.n, self.dispatched, count)
            start = self.epoch * self.n + pieces[0][0]
            where = dtype(start)
            if len(pieces) > 1:  # the batch spans two runs of the share
                exact = True
                step = runs_step(self.graphdef, tuple(hi - lo for lo, hi in pieces))
                where = np.asarray([self.epoch * self.n + lo for lo, _ in pieces], dtype)
        span = None if pieces and len(pieces) > 1 else count if exact else self.batch_size
        batch = self._timed(step, where, span)
        if count < self.batch_size and not exact:
            batch = cut_batch(batch, count)
        if self.host_fields:
            batch, indices = self._join_host_fields(batch, start, count, pieces)
            if self.host_stages:
                with self.stats.timer("stages"), stage_context(self.plan):
                    batch = apply_stages(
                        self.host_stages, batch, jnp.asarray(indices),
                        np.int32(self.epoch), for_stages(self.key),
                    )
        batch = self._placed(batch, self.dispatched)
        self.dispatched += count
        return count, batch, start

    def _join_host_fields(
        self, batch: Batch, start: int, count: int, pieces: Any
    ) -> tuple[Batch, np.ndarray]:
        """The source's host fields added to ``batch``, run by run for a re-split share."""
        if not pieces or len(pieces) == 1:
            return self.source.with_host_fields(batch, start, count)
        parts, indices, at = [], [], 0
        for lo, hi in pieces:
            part = jax.tree.map(lambda v, a=at, b=at + hi - lo: v[a:b], batch, is_leaf=is_host_leaf)
            part, idx = self.source.with_host_fields(part, self.epoch * self.n + lo, hi - lo)
            parts.append(part)
            indices.append(np.asarray(idx))
            at += hi - lo
        return concat_batches(parts, on_device=True), np.concatenate(indices)


@functools.lru_cache(maxsize=64)
def _cut_program(count: int) -> Any:
    return jax.jit(lambda leaves: [v[:count] for v in leaves])


def cut_batch(batch: Batch, count: int) -> Batch:
    """The first ``count`` records of every field of ``batch``: accelerator fields by
    one compiled call (eager slices cost per field), others by
    :func:`~datarax.core.batch.head_rows`.

    >>> cut_batch({"x": jnp.arange(4), "t": ["a", "b", "c", "d"]}, 2)
    {'t': ['a', 'b'], 'x': Array([0, 1], dtype=int32)}
    """
    leaves, tree = jax.tree.flatten(batch, is_leaf=is_host_leaf)
    on_chip = [i for i, v in enumerate(leaves) if isinstance(v, jax.Array)
               and not all(d.platform == "cpu" for d in v.devices())]
    if on_chip:
        for i, cut in zip(on_chip, _cut_program(count)([leaves[i] for i in on_chip])):
            leaves[i] = cut
    chip = set(on_chip)
    return jax.tree.unflatten(tree, [v if i in chip else head_rows(v, count)
                                     for i, v in enumerate(leaves)])

