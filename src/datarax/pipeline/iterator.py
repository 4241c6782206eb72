"""``PipelineIterator``: one pass of a Pipeline over its source.

The iterator never keeps a copy of the position: the source owns it. The iterator
asks the source to ``seek`` at the start of a pass, reports records handed out
(``advance``, indexed sources) or lets a host source advance itself as it serves, and
reads the position back for ``get_state()``. Two paths, chosen by ``source.kind``:

* indexed — the compiled step (:func:`~datarax.pipeline.steps.indexed_step`) dispatched
  ``prefetch`` batches ahead on a dispatch thread (:mod:`datarax.pipeline.dispatch`);
  a source keeping text on the host (``has_host_fields``) gets a step that gathers its
  device fields only, then ``with_host_fields`` adds the text of the same records and
  the stages run on the host (dispatched on the consumer's thread);
* host / stream — ``source.get_batch_with_indices`` joined into full batches, checked
  against ``element_spec()``, stages compiled (:func:`~datarax.pipeline.steps.stage_step`).

With ``sharding=`` every batch is placed on the mesh as it is prepared (indexed: when
dispatched, so prefetched batches wait placed; host: in place of the device copy),
see :mod:`datarax.pipeline.devices`. After an elastic restore
(:mod:`datarax.pipeline.elastic`) an indexed epoch's share is a few runs of positions.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, concat_batches
from datarax.core.data_source import SourceKind
from datarax.core.errors import SpecMismatchError, StaleIteratorError
from datarax.core.keys import draw
from datarax.core.spec import TextSpec, first_nonfinite, is_text_value, validate_batch
from datarax.pipeline.dispatch import DispatchAhead, IndexedDispatch, host_leaf, start_ahead
from datarax.pipeline.steps import apply_stages, stage_step

if TYPE_CHECKING:
    from datarax.pipeline.pipeline import Pipeline

Batch = dict[str, Any]


class PipelineIterator:
    """One pass of a :class:`Pipeline`; yields dicts of JAX arrays.

    ``get_state()`` returns the small JSON-able state of the source's position (what
    has been handed out); ``set_state()`` on an iterator of an identically built
    pipeline continues with exactly the remaining batches. ``len(iterator)`` is the
    number of batches left in this pass, when the source's length is known.
    Iterators are context managers; ``close()`` ends the pass early and releases the
    source's reader threads (the position is kept).
    """

    def __init__(self, pipeline: Pipeline, epoch: int, resume_at: int | None = None) -> None:
        self._pipeline = pipeline
        self._source = pipeline.source
        self._plan = pipeline.plan
        self._kind = self._source.kind
        self._batch_size = self._plan.batch_size
        self._queue: collections.deque[tuple[int, Batch, int]] = collections.deque()
        self._closed = False
        self._superseded = False
        self._stage_graph: tuple[Any, Any] | None = None
        self._ahead: DispatchAhead | None = None
        self._stats = pipeline._stats
        self._begin(epoch, resume_at)

    # ---------------------------------------------------------------- position
    def _begin(self, epoch: int, resume_at: int | None) -> None:
        """Start pass ``epoch`` (``resume_at`` None) or continue it where the source stands."""
        source = self._source
        if resume_at is None:
            source.seek(epoch, 0)
        self._epoch = epoch
        self._may_roll = bool(resume_at)  # a restored pass with nothing left rolls on
        self._handed_any = False
        self._queue.clear()
        self._prepared = False
        self._pass_done = False
        self._finished = False
        self._mark()

    def _mark(self) -> None:
        self._pipeline._note_left(ended=self._finished)

    def supersede(self) -> None:
        """End this iterator because a newer ``iter(pipeline)`` took over."""
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

    def __len__(self) -> int:
        """Batches left in this pass; ``TypeError`` when the source's length is unknown."""
        size = self._source.epoch_size()
        if size is None:
            raise TypeError(
                f"len() of this iterator is unknown: {type(self._source).__name__} does not "
                "know its length (a stream)."
            )
        if self._finished or self._closed:
            return 0
        elastic = self._pipeline.elastic_epoch(self._epoch)
        if elastic is not None:
            size = elastic.size
        return self._plan.batches(max(self._plan.served(size) - self._source.index, 0))

    def get_state(self) -> dict[str, Any]:
        """Small JSON-able state: epoch, records handed out, settings, source position."""
        return self._pipeline.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline)."""
        self._pipeline.set_state(state)
        self._closed = self._superseded = False
        self._release()
        self._begin(self._source.epoch, self._source.index)
        self._pipeline._adopt(self)

    # -------------------------------------------------------------- iteration
    def __iter__(self) -> PipelineIterator:
        return self

    def __enter__(self) -> PipelineIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _release(self) -> None:
        self._queue.clear()
        if self._ahead is not None:
            self._ahead.stop()
            self._ahead = None
        if self._kind is not SourceKind.INDEXED:
            closer = getattr(self._source, "close_epoch", None)
            if closer is not None:
                closer()

    def close(self) -> None:
        """Stop this pass early; further ``next()`` raises ``StopIteration``."""
        if not self._closed and not self._superseded:
            self._release()
        self._closed = True

    def __del__(self) -> None:
        # A dropped iterator (``break`` out of a loop, ``del``) releases reader threads now.
        try:
            if not self._closed and not self._superseded:
                self._release()
        except Exception:  # noqa: BLE001 - best effort during garbage collection
            pass

    def __next__(self) -> Batch:
        if self._superseded:
            raise StaleIteratorError(
                f"This iterator of the Pipeline over {type(self._source).__name__} was ended "
                "by a newer iter(pipeline): one iterator per pipeline is live at a time. "
                "Keep using the newest iterator, or build a second Pipeline (with its own "
                "source) for an independent pass."
            )
        if self._closed or self._finished:
            raise StopIteration
        with self._stats.timer("wait"):
            try:
                batch = self._next_batch()
            except StopIteration:
                if not (self._may_roll and not self._handed_any):
                    self._end_pass()
                    raise
                # A restored position at the end of its pass: continue with the next pass.
                self._release()
                self._begin(self._epoch + 1, None)
                try:
                    batch = self._next_batch()
                except StopIteration:
                    self._end_pass()
                    raise
        self._handed_any = True
        self._may_roll = False
        self._stats.count(batch_length(batch))
        return batch

    def _next_batch(self) -> Batch:
        if self._kind is SourceKind.INDEXED:
            return self._next_indexed()
        return self._next_host()

    def _end_pass(self) -> None:
        """The pass is over: release its reader; the source stays at the pass's end, so
        the next ``iter(pipeline)`` (or a restore of this position) starts the next pass."""
        self._finished = True
        self._release()
        self._mark()

    # ------------------------------------------------------------ indexed path
    def _prepare_indexed(self) -> None:
        self._dispatch = IndexedDispatch(self._pipeline, self._epoch)
        self._ahead = start_ahead(self._dispatch, self._plan.prefetch)
        self._expect = (self._source.epoch, self._source.index)
        self._prepared = True

    def _next_indexed(self) -> Batch:
        source = self._source
        if self._prepared and (source.epoch, source.index) != self._expect:
            # The source was moved from outside (its set_state, nnx.update): what was
            # dispatched ahead belongs to the old position; continue from the new one.
            self._release()
            self._begin(source.epoch, source.index)
        if not self._prepared:
            self._prepare_indexed()
        if self._ahead is not None:  # batches prepared on the dispatch thread
            item = self._ahead.get()
        else:
            while len(self._queue) <= self._plan.prefetch:
                made = self._dispatch.dispatch_one()
                if made is None:
                    break
                self._queue.append(made)
            item = self._queue.popleft() if self._queue else None
        if item is None:
            raise StopIteration
        count, batch, start = item
        if self._plan.check_finite:  # checked on this process's rows, then placed
            self._check_finite(
                batch, lambda: self._source.record_indices_at(start, self._batch_size, None)
            )
            batch = self._place(batch, self._source.index)
        self._source.advance(count)
        self._expect = (self._expect[0], self._expect[1] + count)
        self._mark()
        if self._ahead is not None:
            self._ahead.resume()
        return batch

    # --------------------------------------------------------------- host path
    def _next_host(self) -> Batch:
        source = self._source
        position = source.index
        with self._stats.timer("read"):
            batch, indices = self._read_full_batch()
        if batch is None:
            raise StopIteration
        count = batch_length(batch)
        if count < self._batch_size and self._plan.drop_remainder:
            raise StopIteration
        with self._stats.timer("validate"):
            validate_batch(
                batch,
                source.checked_element_spec(),
                batch_size=self._batch_size,
                where=f"{type(source).__name__} batch at record {position} of epoch "
                f"{self._epoch}",
            )
        stages = list(self._pipeline.stages)
        if stages:
            with self._stats.timer("stages"):
                batch = self._run_stages(stages, batch, np.asarray(indices))
        if self._plan.check_finite:  # on this process's rows, before they join a mesh
            self._check_finite(batch, lambda: indices, position)
        if self._plan.placement is not None:  # straight from host memory onto the mesh
            batch = self._place(batch, position)
        elif not stages:
            with self._stats.timer("transfer"):
                batch = jax.tree.map(
                    lambda v: v if is_text_value(v) or isinstance(v, list) else jax.device_put(v),
                    batch,
                    is_leaf=host_leaf,
                )
        self._mark()
        return batch

    def _place(self, batch: Batch, position: int) -> Batch:
        """``batch`` placed with the pipeline's ``sharding=`` (unchanged without one)."""
        placement = self._plan.placement
        if placement is None:
            return batch
        with self._stats.timer("transfer"):
            return placement.place(batch, f"batch at record {position} of epoch {self._epoch}")

    def _check_finite(self, batch: Batch, stable_indices: Any, position: int | None = None) -> None:
        found = first_nonfinite(batch)
        if found is None:
            return
        field, row = found
        stable = int(np.asarray(stable_indices())[row])
        at = self._source.index if position is None else position
        raise SpecMismatchError(
            f"{type(self._source).__name__}: field '{field}' of the record at position "
            f"{at + row} of epoch {self._epoch} (stable index {stable}) holds "
            "NaN or inf (check_finite=True). Fix or filter that record in the source or "
            "the stage that produced it.",
            fields=[field],
        )

    def _read_full_batch(self) -> tuple[Batch | None, Any]:
        """Exactly ``batch_size`` records, or fewer only where the pass ends.

        A source may return short batches mid-pass (e.g. at a file boundary); they are
        joined so that no record is lost and every batch but the last is full.
        """
        parts: list[tuple[Batch, np.ndarray]] = []
        have = 0
        source = self._source
        while have < self._batch_size and not self._pass_done:
            start = source.index
            batch, indices = source.get_batch_with_indices(self._batch_size - have)
            if batch is None:
                self._pass_done = True  # ask nothing more of this pass
                break
            batch = dict(batch)
            count = batch_length(batch)
            if indices is None:
                indices = np.arange(start, start + count)
            parts.append((batch, np.asarray(indices)))
            have += count
        if not parts:
            return None, None
        if len(parts) == 1:
            return parts[0]
        return concat_batches([b for b, _ in parts]), np.concatenate([i for _, i in parts])

    def _run_stages(self, stages: list[Any], batch: Batch, indices: np.ndarray) -> Batch:
        epoch = np.int32(self._epoch)
        key = self._pipeline.key_pair()
        if any(is_text_value(v) or isinstance(v, list) for v in jax.tree.leaves(batch, is_leaf=host_leaf)):
            return apply_stages(stages, batch, jnp.asarray(indices), epoch, draw(*key))
        if self._stage_graph is None:  # split once per pass, not per batch
            self._stage_graph = nnx.split(stages)
        graphdef, state = self._stage_graph
        return stage_step(graphdef)(state, batch, indices.astype(np.int32), epoch, key)


def output_spec(pipeline: Pipeline) -> Any:
    """Per-record structure of ``pipeline``'s batches after its stages (abstract).

    Text fields (host strings) are reported as :class:`TextSpec` from the source's
    spec; stages over text batches run on the host and are not traced here.
    """
    source = pipeline.source
    spec = source.checked_element_spec()
    leaves = jax.tree.leaves(spec, is_leaf=lambda s: isinstance(s, TextSpec))
    if any(isinstance(s, TextSpec) for s in leaves):
        return spec
    stages = list(pipeline.stages)
    size = pipeline.batch_size
    batch = jax.tree.map(lambda s: jax.ShapeDtypeStruct((size, *s.shape), s.dtype), spec)
    key = pipeline.key_pair()

    def run(batch: Batch) -> Batch:
        indices = jnp.arange(size, dtype=jnp.int32)
        return apply_stages(stages, dict(batch), indices, jnp.int32(0), draw(*key))

    out = jax.eval_shape(run, batch)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), out)
