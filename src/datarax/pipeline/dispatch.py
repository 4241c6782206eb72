"""Indexed batches computed from positions: what one pass dispatches.

:class:`IndexedDispatch` holds everything one pass of an indexed source needs to
compute its batches (the split graph, the compiled step, positions, keys), and
:meth:`~IndexedDispatch.dispatch_one`, which computes and places the next batch. It
never moves the source's position: the iterator advances it when it hands a batch out.
:meth:`~IndexedDispatch.start` runs it on the read-ahead thread of :mod:`datarax.pipeline.ahead`
(on the CPU backend; elsewhere the loop's thread dispatches it ahead), so that the
positions → gather → stages → placement of the next batches run while the consumer's
thread trains.
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
from flax import nnx

from datarax.core.batch import concat_batches, head_rows
from datarax.core.keys import for_stages, step_keys
from datarax.core.operator import all_per_record
from datarax.core.dtypes import is_host_leaf
from datarax.core.spec import checked_spec, record_bytes as spec_record_bytes, refuse_declared_64bit
from datarax.core.stages import apply_stages, stage_positions
from datarax.pipeline.ahead import DispatchAhead, run_ahead
from datarax.pipeline.devices import place_batch, stage_context, stage_device
from datarax.pipeline.plan import PassContext
from datarax.pipeline.steps import grouped_step, indexed_step, runs_step
from datarax.typing import Batch

Item = tuple[int, Batch, int]  # (records, batch, global start position)
#: a batch as the compiled driver hands it out: (positions covered, batch, records, their
#: stable indices (called for check_finite's message), whether its rows are filtered)
Served = tuple[int, Batch, int, Callable[[], Any], bool]
_INT32_MAX = 2**31 - 1
#: small batches (under GROUP_BELOW records) are computed several per dispatch, up to
#: GROUP_RECORDS records and MAX_GROUP batches at once; so are batches of few bytes
#: (narrow records), up to GROUP_BYTES of source records at once
GROUP_BELOW = 128
GROUP_RECORDS = 512
GROUP_BYTES = 512 * 1024
MAX_GROUP = 16
#: ... in passes of at least this many batches, where the saved dispatches (~0.2 ms
#: each on CPU) repay compiling the grouped program once
GROUP_MIN_BATCHES = 512
#: a group read as one run of positions (no stages: one gather cut into batches) goes
#: up to this many times those limits (its program grows by two small cuts a batch)
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


def position_dtype() -> Any:
    """The dtype of global record positions: int64 with ``jax_enable_x64``, else int32."""
    return np.int64 if jax.config.jax_enable_x64 else np.int32


def check_positions(epoch: int, n: int, end: int) -> None:
    """Refuse global record positions up to ``end`` (epoch ``epoch`` of an ``n``-record
    source) past what int32 holds, with ``jax_enable_x64`` off."""
    if end > _INT32_MAX and not jax.config.jax_enable_x64:
        raise OverflowError(
            f"epoch {epoch} of a {n}-record source passes 2**31 global record positions; "
            "enable jax_enable_x64 to continue."
        )


def record_bytes(source: Any) -> int:
    """Bytes one record of ``source`` declares in its ``element_spec()`` (0 if unknown;
    text fields count 0)."""
    try:
        return spec_record_bytes(checked_spec(source))
    except Exception:  # noqa: BLE001 - a spec that cannot say: group by records only
        return 0


def pass_arguments(context: PassContext, epoch: int, graphdef: Any, state: Any,
                   extra: Any) -> tuple[Any, Any, Any, Any]:
    """``(inputs, state, key, extra)`` of the compiled calls of pass ``epoch`` of an
    indexed source: its step inputs of this epoch (a source may read its order from a
    table built for it), and the NNX ``state``, the pass's keys and ``extra`` placed by
    the session's :class:`~datarax.pipeline.pass_reuse.PassReuse` (the last pass's
    placed constants, steps and executables, where unchanged). With
    ``stages_on="host"`` every argument lies on the CPU (the columns copied once per
    pipeline), so the step is compiled for and runs there."""
    device = stage_device(context.plan)
    inputs = context.source.epoch_step_inputs(epoch)
    if device is not None:
        inputs = context.session.host_inputs.on(inputs, device)[0]
    keys = step_keys(*context.key_pair(), stage_positions(context.stages), epoch)
    return (inputs, *context.session.pass_reuse.constants(graphdef, state, keys, extra,
                                                          device=device, inputs=inputs))


#: the compiled steps called at least once in this process (a first call traces and
#: compiles, or loads from datarax's store of compiled steps, or waits for the thread
#: compiling it ahead)
_CALLED: weakref.WeakSet[Any] = weakref.WeakSet()


def call_timer(step: Any) -> str:
    """The stats timer a call of ``step`` counts under: ``"compile"`` for its first call
    in this process, ``"step"`` after."""
    timer = "step" if step in _CALLED else "compile"
    _CALLED.add(step)
    return timer

def call_bound(step: Any, bound: dict[Any, Any], args: tuple[Any, ...]) -> tuple[Any, str]:
    """``step(*args)`` and the timer it counts under: after its first call (kept in
    ``bound``) its compiled executable is called directly — every call of a pass has
    arguments of one signature, so it is not looked up again (~30 us a call; a filtered
    step's lookup hashes its graph definition, ~0.4 ms)."""
    found = bound.get(step)
    if found is not None:
        return found(*args), "step"
    out = step(*args)
    bound[step] = step.executable(*args)
    return out, call_timer(step)


#: vectorized grouped steps whose first call raised (computed by a loop instead)
_NOT_VECTORIZED: weakref.WeakSet[Any] = weakref.WeakSet()


class IndexedDispatch:
    """The batches of one pass of an indexed source, computed from positions.

    Starts at the source's current position of pass ``epoch``; each
    :meth:`dispatch_one` computes the next batch (placed on the pipeline's mesh unless
    ``check_finite`` wants it on the host first) and returns ``(records, batch, start)``,
    or None after the pass's last batch. Small batches of a long pass (at least
    ``GROUP_MIN_BATCHES``) are computed :func:`group_size` at a time by one dispatch
    (:func:`~datarax.pipeline.steps.grouped_step`), each exactly as it would be alone;
    :meth:`dispatch_some` returns a whole group.
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
        # A source keeping text on the host: the step gathers the device fields, the
        # text joins them by the same record indices, and the stages run on the host.
        self.host_fields = source.has_host_fields()
        self.host_stages = stages if self.host_fields else []
        self.graphdef, state = nnx.split((source, [] if self.host_fields else stages))
        self.exact_short = not self.host_fields and not all_per_record(stages)
        self.n = len(source)  # type: ignore[arg-type]
        self.lo = source.shard.bounds(self.n)[0]
        self.resplit = context.resplit(epoch)
        size = source.epoch_size() or 0
        if self.resplit is not None:  # this epoch's share is re-split runs
            size = self.resplit.size(self.n)
        self.dispatched = source.index
        self.total = self.plan.end(size, self.dispatched)
        # no batch of this pass holds more than its records: a batch_size past them
        # (batch_size=10**6 over 10 records) computes no rows it would only cut off
        self.batch_size = min(self.batch_size, max(size, 1))
        # the first call's position placed with the constants (not copied by the call)
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
        # looked up once: hashing the graph definition costs ~0.7 ms a lookup.
        # Per-record stages run faster side by side (vmap: per-image scaling and flips ~1.9x on CPU);
        # a bare gather (vmap's batched gather ~1.25x slower) and batch-level stages
        # (mixup: compiling side by side took 2.6x as long) one after the other.
        self.vectorized = bool(stages) and all_per_record(stages)
        self.grouped = self._grouped_step() if self.group > 1 else None
        self.made: collections.deque[Item] = collections.deque()  # computed, not yet taken
        # step -> its executable for calls with this pass's constants (kept across passes)
        self.bound: dict[Any, Any] = self.reuse.bound
        # where the last call said the next batch starts: (position, it on the device)
        self.after: tuple[int, Any] | None = (
            None if first is None else (int(first), placed_first))

    def _first_position(self) -> Any:
        """The position of the pass's first call (None: a re-split share's, or past
        what its dtype holds: the call raises as it would without it)."""
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
        """``(step, arguments)`` of each program this pass will call from where it
        stands: the full batch (or group), and where batch-level stages need the short
        last batch at its own size, that one too — so they can be compiled before the
        first batch is asked for. Empty for a pass of a re-split share."""
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

        A step that says where the next batch starts (``span`` records on: the indexed
        and grouped steps) hands that position back on the device; the pass's next call
        at that position passes it in again, so no position is copied to the device per
        batch (~0.17 ms a call on a TPU v5e). After its first call in the pass a step's
        executable is called directly: every call of a pass has arguments of one
        signature (the same constants, positions of one dtype): :func:`call_bound`."""
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
        """The next group's batches: side by side, or — where the step cannot be
        vectorized (``jax.vmap`` raised on its first call) — one after the other."""
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
        """A batch of ``count`` records covering ``covered`` positions was handed out
        (or, past the pass's end, dropped): nothing to count unfiltered."""

    def finished(self) -> None:
        """The pass has no more batches: nothing to count unfiltered."""

    def start(self, depth: int) -> DispatchAhead | None:
        """A worker preparing the batches ``depth`` dispatches ahead, or None where they
        are dispatched on the consumer's thread: ``prefetch=0``, text kept on the host
        (host stages run in Python), or no way to copy the consumer's JAX settings. (The
        compiled driver asks only where its step runs on a backend of
        ``driver_compiled.WORKER_BACKENDS``.) The last pass's worker, parked when that
        pass ended, makes them where it can (no thread started)."""
        parked = self.reuse.parked()  # the last pass's worker, waiting for this one
        if self.host_fields:
            if parked is not None:
                parked.stop()
            return None
        # depth counts dispatches: a grouped pass keeps ``depth`` groups of batches ahead
        return run_ahead(self.dispatch_some, depth * self.group, parked)

    def _placed(self, batch: Batch, at: int) -> Batch:
        if self.plan.check_finite:  # checked on the host first, then placed
            return batch
        return place_batch(self.plan, self.stats, batch, at, self.epoch)  # queued placed

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
        # The pass's last group is the same program, its batches past the end dropped
        # and a short last batch cut (padded, as one batch alone would be) — so the
        # tail needs no second program — unless batch-level stages need its exact size.
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
        # the step's records: the short batch's own size, else the full batch (padded)
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
        """The source's host fields added to ``batch`` (run by run for a batch of a re-split share
        that spans several runs of positions)."""
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
    """The first ``count`` records of every field of ``batch`` (a pass's short last batch
    cut from a full-size result): the fields on an accelerator cut by one compiled call
    (an eager slice costs ~0.5 ms a field on a TPU v5e's host), the others by
    :func:`~datarax.core.batch.head_rows` (on the CPU a zero-copy view).

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

