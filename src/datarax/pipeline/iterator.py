"""``PipelineIterator``: one pass of a Pipeline over its source.

The iterator never keeps a copy of the position: the source owns it. The iterator
asks the source to ``seek`` at the start of a pass, reports records handed out
(``advance``, indexed sources) or lets a host source advance itself as it serves, and
reads the position back for ``get_state()``. Its batches come from one driver, chosen
from the plan's read mode (:mod:`datarax.core.reading`, decided when the pipeline was
built) and its ``FilterOperator`` (:func:`open_driver`; the drivers:
:mod:`datarax.pipeline.driver`); the epoch-end rule, a failed batch's rewind, padding,
``len()`` and the state live here, once for both. With ``sharding=`` every batch is
placed on the mesh as it is prepared, see :mod:`datarax.pipeline.devices`.
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
from datarax.pipeline.driver import Driver, SourceMoved
from datarax.pipeline.driver_compiled import CompiledDriver
from datarax.pipeline.filtered import refuse_resplit
from datarax.pipeline.host_pass import padded_rows
from datarax.pipeline.plan import PassContext, check_own_share, filter_position
from datarax.pipeline.state import get_state, restore
from datarax.typing import Batch


#: where a source stood before a batch: (epoch, index, its ``skip_state()`` or None)
BatchStart = tuple[int, int, Any]


def open_driver(context: PassContext, epoch: int, at: int | None) -> Driver:
    """The driver of pass ``epoch`` from where the source stands: compiled or cursor
    (the plan's read mode), filtered where stage ``at`` is a ``FilterOperator``."""
    if context.reading.compiled:
        return CompiledDriver(context, epoch, at)
    # imported here: a pipeline over an indexed source never loads the host read path
    # (its reader, bad-record ledger and decode checks)
    from datarax.pipeline.driver_cursor import CursorDriver

    return CursorDriver(context, epoch, at)


class PipelineIterator:
    """One pass of a :class:`Pipeline`; yields dicts of JAX arrays.

    ``get_state()`` returns the small JSON-able state of the source's position (what
    has been handed out); ``set_state()`` on an iterator of an identically built
    pipeline continues with exactly the remaining batches. ``len(iterator)`` is the
    number of batches left in this pass, when the source's length is known.
    Iterators are context managers; ``close()`` ends the pass early and releases the
    source's reader threads (the position is kept).
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
        # a source that counts the records it skipped as bad (on_error="skip"): a failed
        # batch puts its ``skip_state()`` back
        self._counts_skips = context.reading.counts_skips
        self._consumer = threading.get_ident()  # the thread that made it (the loop's)
        self._shard = self._source.shard  # checked per batch: a later Pipeline may re-shard
        # one next() at a time: threads sharing the iterator take turns, each batch
        # handed out once (the drivers and the position assume one caller)
        self._turn = threading.RLock()
        if self._filter_at is not None:
            refuse_resplit(context, epoch)
        self._begin(epoch, resume_at)

    # ---------------------------------------------------------------- position
    def _begin(self, epoch: int, resume_at: int | None) -> None:
        """Start pass ``epoch`` (``resume_at`` None) or continue it where the source stands."""
        source = self._source
        if resume_at is None:
            source.seek(epoch, 0)
        self._epoch = epoch
        self._finished = False
        if source.index == 0:
            self._mark()  # a break before any batch: the next iter() restarts this epoch
        # A pass continued where a restore left it is marked once a batch is handed out:
        # an iterator that served none leaves the next iter() to continue it (nothing
        # of the restored epoch is passed over).

    def _follow_source(self) -> None:
        """Continue this loop from where the source was moved to."""
        self._release()
        source = self._source
        # seek where it stands: readers derived from the position (a stream's pass, a
        # host reader) start over there, as after set_state (nnx.update moves only the
        # Variables)
        source.seek(source.epoch, source.index)
        self._begin(source.epoch, source.index)

    def _mark(self) -> None:
        self._context.session.note_left(self._source)

    def supersede(self) -> None:
        """End this iterator because a newer ``iter(pipeline)`` took over (after the
        ``next()`` another thread may be making: what it opens is released here too)."""
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
        if not hasattr(self, "_epoch"):  # __init__ raised (a traceback showing its locals)
            return "<PipelineIterator, not started>"
        state = ("superseded by a newer iter(pipeline)" if self._superseded else "ended"
                 if self.exhausted else f"live, {self._source.index} records handed out")
        return (f"<PipelineIterator over {type(self._source).__name__}: epoch {self._epoch}, "
                f"batch_size {self._batch_size}, {state}>")

    def __len__(self) -> int:
        """Batches left in this pass; ``TypeError`` when the source's length is unknown.
        Records a source will skip as bad (``on_error="skip"``) count until skipped."""
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
        """An iterator is one pass of its pipeline, on this process's threads: refused
        by ``copy``, ``copy.deepcopy`` and ``pickle`` alike, naming what to copy."""
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
        # A dropped iterator (``break`` out of a loop, ``del``) releases reader threads now.
        # Collected on another thread (the garbage collector runs wherever memory is
        # asked for: a reader thread, a process pool's manager), releasing there could
        # wait for that very thread: release on a thread of its own instead.
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
        if self._source.shard is not self._shard:  # set again: by another Pipeline?
            check_own_share(self._context.session.share, self._source)
            self._shard = self._source.shard
        start = self._batch_start()
        began = time.perf_counter()  # the "wait" timer (inline: this runs per batch)
        try:
            batch = self._next_batch()
            valid = self._valid_rows()
            if self._plan.pad_remainder:
                batch = pad_batch(batch, self._count, self._batch_size, valid)
        except StopIteration:
            self._end_pass()
            raise
        except BaseException as err:  # an error, or Ctrl-C in a notebook's loop
            self._failed(start)
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
        """Records of the batch just read that are real (a padded share's last slots are
        padding)."""
        if not self._source.shard.padded:
            return self._count
        n = length_or_none(self._source) or 0
        after = self._source.index  # the slots served before this batch are real
        return max(min(self._count, self._source.shard.records(n) - (after - self._count)), 0)

    def _next_batch(self) -> Batch:
        while True:
            if self._driver is None:
                self._driver = open_driver(self._context, self._epoch, self._filter_at)
            try:
                batch, self._count = self._driver.next_batch()
            except SourceMoved:  # prepared for a position the source was moved away from
                self._follow_source()
                continue
            self._mark()
            return batch

    def _batch_start(self) -> BatchStart:
        """Where the source stands before a batch is prepared (see :meth:`_failed`)."""
        source = self._source
        return (*source.datarax_position.where(),
                source.skip_state() if self._counts_skips else None)

    def _failed(self, start: BatchStart) -> None:
        """A batch failed before it was handed out (a bad record, NaN under check_finite,
        a stage raising, an interrupt): nothing of it was served, so the source goes
        back to where the batch began (its position and skip count; reading it may have
        moved them) and a retry — ``next()`` again, a new ``iter(pipeline)``, or a state
        saved now — reads the same records again (and meets the same error). The
        read-ahead worker and reader threads are released now rather than when this
        iterator is collected."""
        self._release()
        rewind(self._source, start)
        # not "left here": the next iter(pipeline) continues this pass at the failed
        # batch (a break after a batch handed out starts the next epoch)
        self._context.session.left = None

    def _end_pass(self) -> None:
        """The pass is over: release its reader and stand at the next epoch's start, so
        a state taken now says so (one taken before, at the pass's end, restores to an
        empty pass: docs/reliability.md, "Epoch ends")."""
        self._finished = True
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.end()
        self._source.seek(self._source.epoch + 1, 0)
        self._mark()


def traced_call(call: str, err: BaseException | None = None) -> ConfigError | None:
    """The error for ``call`` made while JAX traces a function, or None when it does
    not (checked only once something failed: a batch is read on the host)."""
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
    """Put ``source`` back at ``start`` (from before a batch that failed) where reading
    moved it: its position, and the whole ``skip_state()`` of a source that skips bad
    records (a concatenation's counts by part too). A source that did not move is left
    alone (a stream would re-read its pass up to the position after a seek).

    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(8)})
    >>> src.seek(0, 2); start = (*src.datarax_position.where(), None)
    >>> src.seek(0, 6); rewind(src, start); src.index
    2
    """
    epoch, index, skips = start
    recount = skips is not None and source.skip_state() != skips
    if recount or source.datarax_position.where() != (epoch, index):
        source.seek(epoch, index)  # readers restart there
    if recount:
        source.restore_skip_state(skips)


def pad_batch(batch: Batch, count: int, size: int, valid: int | None = None) -> Batch:
    """``batch`` (``count`` records) padded to ``size`` rows by repeating its last record,
    with a boolean ``"valid"`` field that is False on the padding rows (and on rows
    ``valid`` and after: a padded share's slots past the epoch's end, which repeat the
    last record before them too).

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
    rows = count if valid is None or valid <= 0 else min(count, valid)  # the records kept
    valid = np.arange(size) < (count if valid is None else valid)
    if rows < size:
        def pad(value: Any) -> Any:
            if isinstance(value, list):
                return value[:rows] + [value[rows - 1]] * (size - rows)
            return owned_device_put(padded_rows(np.asarray(value)[:rows], size))

        batch = jax.tree.map(pad, batch, is_leaf=lambda v: isinstance(v, list))
    return {**batch, "valid": jax.device_put(valid)}


def output_spec(context: PassContext) -> Any:
    """Per-record structure of a pipeline's batches after its stages (abstract).

    Text fields (host strings) are reported as :class:`TextSpec` from the source's
    spec; stages over text batches run on the host and are not traced here.
    """
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
