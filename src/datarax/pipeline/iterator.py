"""``PipelineIterator``: one pass of a Pipeline over its source.

The source owns the position; the iterator never copies it. Batches come from one
driver (:func:`open_driver`); the epoch-end rule, a failed batch's rewind, padding,
``len()`` and the state live here, once for every driver.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datarax.core.lengths import length_or_none
from datarax.core.errors import ConfigError, StaleIteratorError
from datarax.core.keys import draw
from datarax.core.owned import owned_device_put
from datarax.core.spec import checked_spec, has_text
from datarax.core.stages import apply_stages, filtered
from datarax.core.operator import RecordFilter
from datarax.host.counts import count_words
from datarax.pipeline.driver import Driver, SourceMoved
from datarax.pipeline.driver_compiled import CompiledDriver
from datarax.pipeline.filtered import refuse_resplit
from datarax.pipeline.devices import stage_mesh
from datarax.pipeline.host_pass import padded_rows
from datarax.pipeline.plan import PassContext, check_own_share, filter_position
from datarax.pipeline.state import get_state, restore
from datarax.typing import Batch


#: (epoch, index, ``skip_state()`` or None) before a batch
BatchStart = tuple[int, int, Any]


def open_driver(context: PassContext, epoch: int, at: int | None) -> Driver:
    """The driver of pass ``epoch``: compiled or cursor, filtered where stage ``at`` is a
    ``FilterOperator``."""
    if context.reading.compiled:
        return CompiledDriver(context, epoch, at)
    # imported here: an indexed pipeline never loads the host read path
    from datarax.pipeline.driver_cursor import CursorDriver

    return CursorDriver(context, epoch, at)


class PipelineIterator:
    """One pass of a :class:`Pipeline`; yields dicts of JAX arrays.

    ``get_state()`` / ``set_state()`` resume exactly (on an identically built pipeline);
    ``len()`` is the batches left when known. ``close()`` (or ``with``) ends the pass
    early and releases reader threads, keeping the position.
    """

    def __init__(self, context: PassContext, epoch: int, resume_at: int | None = None) -> None:
        self._context = context
        self._source = context.source
        self._plan = context.plan
        self._batch_size = self._plan.batch_size
        self._filter_at = filter_position(list(context.stages))
        self._closed = False
        self._superseded = False
        self._driver: Driver | None = None  # opened at the first next() of the pass
        self._count = 0  # records in the batch being handed out
        self._stats = context.stats
        self._counts_skips = context.reading.counts_skips
        self._consumer = threading.get_ident()
        self._shard = self._source.shard  # checked per batch: a later Pipeline may re-shard
        # one next() at a time: the drivers and the position assume one caller
        self._turn = threading.RLock()
        # (where the source stood, session.left) when this pass was asked for: a stream
        # that refuses to begin it goes back there (see _not_begun)
        self._came_from: tuple[BatchStart, Any] | None = None
        self._unbegun: tuple[int, int, int] | None = None  # where _not_begun left the source
        if self._filter_at is not None:
            refuse_resplit(context, epoch)
        self._begin(epoch, resume_at)

    # ---------------------------------------------------------------- position
    def _begin(self, epoch: int, resume_at: int | None) -> None:
        """Start pass ``epoch`` (``resume_at`` None) or continue it where the source stands."""
        source = self._source
        self._came_from = self._unbegun = None
        if resume_at is None:
            self._came_from = (self._batch_start(), self._context.session.left)
            source.seek(epoch, 0)
        self._epoch = epoch
        self._finished = False
        if source.index == 0:
            self._mark()  # a break before any batch: the next iter() restarts this epoch
        # a restored pass is marked only once a batch is handed out

    def _follow_source(self) -> None:
        """Continue this loop from where the source was moved to."""
        self._release()
        source = self._source
        # readers restart there (nnx.update moves only the Variables)
        source.seek(source.epoch, source.index)
        self._begin(source.epoch, source.index)

    def _mark(self) -> None:
        self._context.session.note_left(self._source)

    def supersede(self) -> None:
        """End this iterator: a newer ``iter(pipeline)`` took over."""
        with self._turn:
            if not self._closed:
                self._release()
            self._superseded = True
            self._closed = True

    @property
    def exhausted(self) -> bool:
        """Whether ``next()`` will serve nothing more (pass over, closed or superseded)."""
        return self._finished or self._closed or self._superseded

    @property
    def epoch(self) -> int:
        """The pass this iterator serves."""
        return self._epoch

    def __repr__(self) -> str:
        if not hasattr(self, "_epoch"):  # __init__ raised
            return "<PipelineIterator, not started>"
        state = ("superseded by a newer iter(pipeline)" if self._superseded else "ended"
                 if self.exhausted
                 else f"live, {count_words(self._source.index, 'record')} handed out")
        return (f"<PipelineIterator over {type(self._source).__name__}: epoch {self._epoch}, "
                f"batch_size {self._batch_size}, {state}>")

    def __len__(self) -> int:
        """Batches left in this pass; ``TypeError`` when the source's length is unknown."""
        self._context.epoch_size("len() of this iterator", "len() of a filtered pass is unknown")
        if self._finished or self._closed:
            return 0
        return self._context.batches_left(self._epoch, self._source.index)

    def get_state(self) -> dict[str, Any]:
        """Small JSON-able state: epoch, records handed out, settings, source position."""
        return get_state(self._context)

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline)."""
        restore(self._context, state)
        if self._filter_at is not None:  # on the same number of processes
            refuse_resplit(self._context, self._source.epoch)
        self._closed = self._superseded = False
        self._release()
        self._begin(self._source.epoch, self._source.index)
        self._context.session.adopt(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused: an iterator is one pass run by this process's threads."""
        raise TypeError(
            "A PipelineIterator cannot be copied or pickled: it is one pass of its "
            "pipeline, run by this process's threads. Copy or pickle the pipeline instead "
            "(copy.deepcopy(pipeline) or pickle.dumps(pipeline) continues at this "
            "iterator's position), or save iterator.get_state() and restore it with "
            "set_state() on an iterator of an identically built pipeline.")

    # -------------------------------------------------------------- iteration
    def __iter__(self) -> PipelineIterator:
        return self

    def __enter__(self) -> PipelineIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _release(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.release()

    def close(self) -> None:
        """Stop this pass early; further ``next()`` raises ``StopIteration``."""
        if not self._closed and not self._superseded:
            self._release()
        self._closed = True

    def __del__(self) -> None:
        # Release reader threads now; collected on another thread (maybe a reader),
        # releasing there could wait on itself, so use a thread of its own.
        try:
            if self._closed or self._superseded:
                return
            if threading.get_ident() == self._consumer:
                self._release()
            else:
                threading.Thread(target=self._release, name="datarax-release", daemon=True).start()
        except Exception:  # noqa: BLE001 - best effort during garbage collection
            pass

    def __next__(self) -> Batch:
        with self._turn:
            return self._next()

    def _next(self) -> Batch:
        if self._superseded:
            raise StaleIteratorError(
                f"This iterator of the Pipeline over {type(self._source).__name__} was ended "
                "by a newer iter(pipeline): one iterator per pipeline is live at a time. "
                "Keep using the newest iterator, or build a second Pipeline (with its own "
                "source) for an independent pass."
            )
        if self._closed or self._finished:
            raise StopIteration
        if self._unbegun is not None:
            self._ask_again()
        if self._source.shard is not self._shard:  # set again: by another Pipeline?
            check_own_share(self._context.session.share, self._source)
            self._shard = self._source.shard
        start = self._batch_start()
        began = time.perf_counter()  # the "wait" timer
        try:
            batch = self._next_batch()
            valid = self._valid_rows()
            if self._plan.pad_remainder:
                batch = pad_batch(batch, self._count, self._batch_size, valid)
        except StopIteration:
            self._end_pass()
            raise
        except BaseException as err:  # an error, or Ctrl-C in a notebook's loop
            self._failed(start, err)
            refusal = traced_call("next() of a Pipeline iterator", err)
            if refusal is None:
                raise
            self._context.session.drop_reuse()
            raise refusal from err
        finally:
            self._stats.seconds["wait"] += time.perf_counter() - began
        self._stats.count(valid)
        return batch

    def _valid_rows(self) -> int:
        """Records of the batch just read that are not a padded share's padding."""
        if not self._source.shard.padded:
            return self._count
        n = length_or_none(self._source) or 0
        after = self._source.index  # the slots served before this batch are real
        return max(min(self._count, self._source.shard.records(n) - (after - self._count)), 0)

    def _next_batch(self) -> Batch:
        if self._plan.stages_on == "host":  # no loop mesh reaches the CPU's steps
            with stage_mesh(self._plan):
                return self._driven_batch()
        return self._driven_batch()

    def _driven_batch(self) -> Batch:
        while True:
            if self._driver is None:
                self._driver = open_driver(self._context, self._epoch, self._filter_at)
            try:
                batch, self._count = self._driver.next_batch()
            except SourceMoved:
                self._follow_source()
                continue
            self._mark()
            self._came_from = None
            return batch

    def _batch_start(self) -> BatchStart:
        """Where the source stands before a batch is prepared (see :meth:`_failed`)."""
        source = self._source
        return (*source.datarax_position.where(),
                source.skip_state() if self._counts_skips else None)

    def _failed(self, start: BatchStart, err: BaseException) -> None:
        """A batch failed before it was handed out: the source goes back to where it
        began (position and skip count), so a retry reads the same records again."""
        self._release()
        # imported here: a pipeline over no stream never loads core.stream
        from datarax.core.stream import CannotGoBack

        if isinstance(err, CannotGoBack) and self._came_from is not None:
            self._not_begun()
            return
        rewind(self._source, start)
        # the next iter(pipeline) continues this pass at the failed batch
        self._context.session.left = None

    def _not_begun(self) -> None:
        """A stream refused to begin this pass (it cannot go back): the source goes back
        to where the pass was asked from, so a state saved now still holds the rest of
        the pass it stood in; the next ``iter()`` or ``next()`` asks for this pass again."""
        assert self._came_from is not None
        (came, left), source, session = self._came_from, self._source, self._context.session
        rewind(source, came)
        session.left = left
        if left is not None and left[:2] == came[:2]:  # left there by a break: still so
            session.note_left(source)
        self._unbegun = (*source.datarax_position.where(), source.datarax_position.restores)

    def _ask_again(self) -> None:
        """``next()`` after :meth:`_not_begun`: ask for the pass again, unless the source
        was moved since (a restore): then continue where it stands."""
        source, unbegun = self._source, self._unbegun
        if unbegun == (*source.datarax_position.where(), source.datarax_position.restores):
            self._begin(self._epoch, None)
        else:
            self._begin(source.epoch, source.index)

    def _end_pass(self) -> None:
        """The pass is over: release its reader and stand at the next epoch's start
        (docs/reliability.md, "Epoch ends")."""
        self._finished = True
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.end()
        self._source.seek(self._source.epoch + 1, 0)
        self._mark()


def traced_call(call: str, err: BaseException | None = None) -> ConfigError | None:
    """The error for ``call`` made while JAX traces a function, or None."""
    if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        return None
    if not isinstance(jnp.zeros(()), jax.core.Tracer):
        return None
    return ConfigError(
        f"{call} was called while JAX traces a function (inside jax.jit, nnx.jit, "
        "jax.lax.scan, ...): it reads the source and moves the position on the host, "
        "between compiled steps. Call it outside and pass the batch in (loss = "
        "train_step(model, pipeline.step())), or run the data and train steps as one "
        "program with pipeline.scan(train_step, length, modules)."
    )


def rewind(source: Any, start: BatchStart) -> None:
    """Put ``source`` back at ``start`` (position and ``skip_state()``) where reading moved
    it; one that did not move is left alone (a stream would re-read its pass).

    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(8)})
    >>> src.seek(0, 2); start = (*src.datarax_position.where(), None)
    >>> src.seek(0, 6); rewind(src, start); src.index
    2
    """
    epoch, index, skips = start
    recount = skips is not None and source.skip_state() != skips
    if recount or source.datarax_position.where() != (epoch, index):
        source.seek(epoch, index)
    if recount:
        source.restore_skip_state(skips)


def pad_batch(batch: Batch, count: int, size: int, valid: int | None = None) -> Batch:
    """``batch`` (``count`` records) padded to ``size`` rows repeating its last record, with
    a boolean ``"valid"`` field, False on padding rows and on rows from ``valid`` on.

    >>> out = pad_batch({"x": np.arange(3)}, 3, 4)
    >>> out["x"].tolist(), out["valid"].tolist()
    ([0, 1, 2, 2], [True, True, True, False])
    >>> pad_batch({"x": np.arange(4)}, 4, 4, valid=1)["x"].tolist()  # a share's last slots
    [0, 0, 0, 0]
    """
    if "valid" in batch:
        raise ConfigError(
            "Pipeline(pad_remainder=True) adds a 'valid' field, but the batch already has "
            "one; rename that field in a stage before padding."
        )
    rows = count if valid is None or valid <= 0 else min(count, valid)
    valid = np.arange(size) < (count if valid is None else valid)
    if rows < size:
        def pad(value: Any) -> Any:
            if isinstance(value, list):
                return value[:rows] + [value[rows - 1]] * (size - rows)
            return owned_device_put(padded_rows(np.asarray(value)[:rows], size))

        batch = jax.tree.map(pad, batch, is_leaf=lambda v: isinstance(v, list))
    return {**batch, "valid": jax.device_put(valid)}


def output_spec(context: PassContext) -> Any:
    """Per-record structure of a pipeline's batches after its stages (abstract); the
    source's spec where it has text (host stages are not traced)."""
    source = context.source
    spec = checked_spec(source)
    if has_text(spec):
        return spec
    stages = [filtered if isinstance(s, RecordFilter) else s for s in context.stages]
    size = context.plan.batch_size
    batch = jax.tree.map(lambda s: jax.ShapeDtypeStruct((size, *s.shape), s.dtype), spec)
    key = context.key_pair()

    def run(batch: Batch) -> Batch:
        indices = jnp.arange(size, dtype=jnp.int32)
        return apply_stages(stages, dict(batch), indices, jnp.int32(0), draw(*key))

    out = jax.eval_shape(run, batch)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), out)
