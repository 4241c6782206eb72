"""The next epoch's pass, started before the loop asks for it.

On an accelerator a compiled pass dispatches its batches ahead on the loop's thread
(:mod:`datarax.pipeline.driver_compiled`). Once it has dispatched its last batch,
:func:`start_next_pass` prepares the pass the next ``iter(pipeline)`` would open (the
next epoch, from its first record) and dispatches its first ``prefetch`` batches, so
that the chip has the next epoch's work while the loop hands out the last batches,
ends the pass and starts the next one. The pass is parked in the pipeline's
:class:`~datarax.pipeline.pass_reuse.PassReuse`; :func:`take_next_pass` gives it to
the next pass that is opened, only if that pass would be built exactly the same:

* the same epoch, from its first record, with the same plan (batch size, prefetch,
  placement) and no re-split share;
* the same NNX graph definition and state leaves (compared as
  :class:`~datarax.pipeline.pass_reuse.PassReuse` compares them: small host values by
  value, JAX arrays by identity; a restore, ``set_state``, ``nnx.update`` or a read of
  the source changes the position or another leaf), the same pipeline key, the same JAX
  settings, and no other pass opened in between.

Otherwise it is dropped (its batches were never handed out) and the pass is built as
before. The source's position is never moved by it: it is built at the next epoch's
start and the position put back at once (nothing else runs on the loop's thread
meanwhile), and its batches count only when handed out, so ``get_state`` is the same
with or without it. It holds no thread; its batches are freed with the pipeline.

It is off by default (``CompiledDriver.next_pass_ahead``): on a TPU v5e, shuffled
images through two per-record stages in a back-to-back ``for`` loop, it cost the loop's thread ~0.5 ms an epoch more than it
saved — the same thread does the same work a few batches earlier, and the switch then
splits the graph once more to check it (``docs/benchmarks.md``, TPU section).

Example (the CPU backend dispatches through a worker, so the loop's-thread path and
the pass started ahead are switched on here):

    >>> import numpy as np
    >>> from datarax.pipeline import Pipeline, driver_compiled
    >>> kept = driver_compiled.WORKER_BACKENDS, driver_compiled.CompiledDriver.next_pass_ahead
    >>> driver_compiled.WORKER_BACKENDS = frozenset()
    >>> driver_compiled.CompiledDriver.next_pass_ahead = True
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> p = Pipeline(source=src, batch_size=4)
    >>> [[b["x"].tolist() for b in p] for _ in range(2)]
    [[[0, 1, 2, 3], [4, 5]], [[0, 1, 2, 3], [4, 5]]]
    >>> driver_compiled.WORKER_BACKENDS, driver_compiled.CompiledDriver.next_pass_ahead = kept
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from flax import nnx

from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.pass_reuse import host_copy, is_unchanged
from datarax.pipeline.plan import PassContext


@dataclass
class NextPass:
    """A pass prepared ahead: its dispatch, the batches it dispatched, and what it was
    built from (see the module)."""

    epoch: int
    plan: Any
    dispatch: IndexedDispatch
    queue: collections.deque[Any]
    done: bool
    failed: Exception | None
    key_pair: tuple[Any, Any]  # host copies of the pipeline key it was built with
    generation: int  # the PassReuse generation its constants were placed in


def start_next_pass(context: PassContext, epoch: int) -> bool:
    """Prepare pass ``epoch`` from its first record and dispatch its first ``prefetch``
    batches (or groups), parked in the pipeline's ``PassReuse``. False (ask again at the
    next batch) while the source's inputs of ``epoch`` are still being made ahead: the
    loop's thread never waits for them here. Nothing is started where the pass could
    not be built the same later (a re-split share, text kept on the host); an error met
    is left to the pass that meets it when asked."""
    source, reuse = context.source, context.session.pass_reuse
    if context.session.resplit_share is not None or source.has_host_fields():
        return True
    ready = getattr(source, "epoch_step_inputs_ready", None)
    if ready is not None and not ready(epoch):
        return False
    position = source.datarax_position
    where = position.where()
    key_pair = tuple(host_copy(v) for v in context.key_pair())
    position.move(epoch, 0)  # as the next pass finds it; put back below
    try:
        dispatch = IndexedDispatch(context, epoch)
        generation = reuse.generation
        made: collections.deque[Any] = collections.deque()
        done, failed = False, None
        depth = context.plan.prefetch * getattr(dispatch, "group", 1)
        while len(made) < depth and not done:
            try:
                items = dispatch.dispatch_some()
            except Exception as err:  # noqa: BLE001 - raised by the next() of its batch
                failed = err
                break
            if items is None:
                done = True
            else:
                made.extend(items)
    except Exception:  # noqa: BLE001 - the pass opened when asked meets it again
        return True
    finally:
        position.move(*where)
    reuse.park_next(NextPass(epoch, context.plan, dispatch, made, done, failed,
                             key_pair, generation))
    return True


def take_next_pass(context: PassContext, epoch: int) -> NextPass | None:
    """The parked pass, if the pass ``epoch`` about to be opened where the source stands
    would be built exactly as it was (see the module); else None (it is dropped)."""
    reuse = context.session.pass_reuse
    ready = reuse.take_next()
    if ready is None:
        return None
    source = context.source
    if (ready.epoch != epoch or source.datarax_position.where() != (epoch, 0)
            or context.session.resplit_share is not None
            or not (ready.plan is context.plan or ready.plan == context.plan)
            or not all(is_unchanged(v, k) for v, k in zip(context.key_pair(), ready.key_pair))):
        return None
    graphdef, state = nnx.split((source, list(context.stages)))  # as the pass splits it
    if not reuse.unchanged_since(ready.generation, graphdef, state):
        return None
    return ready


def drop_next_pass(context: PassContext) -> None:
    """Drop the parked pass now (a restore: its batches are not wanted)."""
    context.session.pass_reuse.take_next()
