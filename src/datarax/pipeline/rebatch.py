"""``Rebatch``: a Pipeline's batches grouped k into one, or each cut into k parts.

Invariant: a Rebatch hands out exactly its pipeline's records, in order, once each; only
batch boundaries move. Its state nests the pipeline's as taken before the current batch
or group (:mod:`datarax.pipeline.epochs`), plus the parts already handed out.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import jax
import numpy as np

from datarax.core.batch import batch_length, concat_batches
from datarax.core.config import check_count
from datarax.core.errors import ConfigError, StaleIteratorError, StateError
from datarax.core.dtypes import is_host_leaf
from datarax.host.counts import count_words
from datarax.pipeline.epochs import Repeat, Transformation
from datarax.pipeline.pipeline import Pipeline
from datarax.typing import Batch


def _rows(batch: Batch, lo: int, hi: int) -> Batch:
    """Records ``lo:hi`` of a batch (device arrays sliced on the device, text lists cut)."""
    return jax.tree.map(lambda v: v[lo:hi], batch, is_leaf=is_host_leaf)


def _check_placement(pipeline: Pipeline, mode: str, k: int) -> None:
    """Refuse a Rebatch that could not keep the pipeline's ``sharding=`` (several processes,
    or parts that do not split over the devices)."""
    placement = pipeline.plan.placement
    if placement is None:
        return
    if jax.process_count() > 1:
        raise ConfigError(
            f"Rebatch({mode}={k}) of a Pipeline with sharding= under {jax.process_count()} "
            "processes: its batches are global arrays of every process's records, which "
            "Rebatch cannot join or cut per process. Build the pipeline without sharding= "
            f"and place the rebatched batches: datarax.sharding.global_batches(Rebatch("
            f"pipeline, {mode}={k}), mesh)."
        )
    split = placement.local_split
    part = pipeline.batch_size // k
    if mode == "split" and part % split:
        raise ConfigError(
            f"Rebatch split={k} cuts the pipeline's batches of {pipeline.batch_size} into "
            f"parts of {count_words(part, 'record')}, which do not split over the {split} "
            "devices of its "
            f"sharding= (mesh axes {list(placement.batch_axes)}); choose a split k with "
            f"{pipeline.batch_size} // k divisible by {split}, or build the pipeline with "
            f"a batch_size that is a multiple of {k * split} ({k} parts of {split} records)."
        )


class Rebatch(Transformation):
    """Iterate ``pipeline`` with ``group=k`` batches joined into one, or each batch
    cut into ``split=k`` equal parts.

    Groups never span two epochs; a short last batch gives a shorter last part. One
    ``for`` is one epoch; ``get_state()``/``set_state()`` resume exactly. Do not iterate
    the wrapped pipeline directly meanwhile. ``sharding=`` is kept (one process only).

    Example:
        >>> import numpy as np
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> def make():
        ...     src = MemorySource(MemorySourceConfig(), {"x": np.arange(7, dtype=np.int32)})
        ...     return Pipeline(source=src, stages=[], batch_size=2)
        >>> [b["x"].tolist() for b in Rebatch(make(), group=3)]
        [[0, 1, 2, 3, 4, 5], [6]]
        >>> halves = Rebatch(make(), split=2)
        >>> len(halves), [b["x"].tolist() for b in halves][:3]
        (7, [[0], [1], [2]])
    """

    def __init__(self, pipeline: Any, *, group: int | None = None,
                 split: int | None = None) -> None:
        if not isinstance(pipeline, Pipeline):
            raise ConfigError(
                f"Rebatch regroups the batches of a Pipeline, got {type(pipeline).__name__}; "
                "pass Rebatch(Pipeline(source=..., stages=..., batch_size=...), group=k) "
                "(or split=k)."
            )
        if (group is None) == (split is None):
            raise ConfigError(
                f"Rebatch takes exactly one of group=k or split=k (got group={group!r}, "
                f"split={split!r})."
            )
        mode, k = ("group", group) if group is not None else ("split", split)
        k = check_count(k, f"Rebatch {mode}=", 1)
        if mode == "split" and pipeline.batch_size % k:
            raise ConfigError(
                f"Rebatch split={k} needs a batch_size divisible by {k}; the pipeline's "
                f"batch_size is {pipeline.batch_size}. Choose a batch_size that is a "
                f"multiple of {k} or another split."
            )
        _check_placement(pipeline, mode, k)
        super().__init__(pipeline)
        self.pipeline = pipeline
        self.mode: str = mode
        self.k: int = k
        self._pending_part = 0  # parts to skip of the next underlying batch (a restore)
        # (pipeline state before the batch being split, parts handed out) while partly out
        self._partial: tuple[dict[str, Any], int] | None = None
        self._live: weakref.ref[RebatchIterator] | None = None  # to close on restore

    def __repr__(self) -> str:
        if not hasattr(self, "k"):  # __init__ raised
            return "Rebatch(not built)"
        return f"Rebatch({self.mode}={self.k}) of {self.described_parent()}"

    @property
    def part_size(self) -> int | None:
        """Records per batch in split mode (None in group mode)."""
        return self.pipeline.batch_size // self.k if self.mode == "split" else None

    @property
    def epoch(self) -> int:
        """The pass the pipeline's source stands in."""
        return self.pipeline.epoch

    @property
    def source(self) -> Any:
        """The pipeline's source."""
        return self.pipeline.source

    @property
    def position(self) -> int:
        """Records of the pipeline's pass handed out (``Pipeline.position``)."""
        return self.pipeline.position

    def repeat(self, epochs: int | None = None) -> Repeat:
        """Its passes ``epochs`` times in a row (``None``: without end), as ``Pipeline.repeat``.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
            >>> twice = Rebatch(Pipeline(source=src, batch_size=2), split=2).repeat(2)
            >>> [b["x"].tolist() for b in twice]
            [[0], [1], [2], [0], [1], [2]]
        """
        return Repeat(self, epochs)

    def batches_for(self, records: int, underlying: int) -> int:
        """Batches handed out for ``underlying`` pipeline batches holding ``records``."""
        if self.mode == "group":
            return math.ceil(underlying / self.k)
        if self.pipeline.plan.pad_remainder:  # every batch is full: padding is cut too
            return underlying * self.k
        full, rest = divmod(records, self.pipeline.batch_size)
        return full * self.k + math.ceil(rest / (self.pipeline.batch_size // self.k))

    def __len__(self) -> int:
        """Batches in one epoch; ``TypeError`` when the pipeline's length is unknown."""
        underlying = len(self.pipeline)
        records = self.pipeline.plan.end(self.pipeline.source.epoch_size() or 0, 0)
        return self.batches_for(records, underlying)

    def __iter__(self) -> RebatchIterator:
        """Start the next pass (or continue the one a restore left)."""
        return self._begin_pass(RebatchIterator(self))

    def _begin_pass(self, iterator: RebatchIterator) -> RebatchIterator:
        """``iterator`` serving the next pass (or the rest of the one a restore left)."""
        # parts to skip stay pending until an iterator reads their batch
        skip = self._pending_part
        self._partial = None
        self._close_live()
        iterator.begin(iter(self.pipeline), skip)
        self._live = weakref.ref(iterator)
        return iterator

    def _close_live(self) -> None:
        live = self._live() if self._live is not None else None
        if live is not None:
            live.supersede()
        self._live = None

    # ------------------------------------------------------------------- state
    KEYS = ("rebatch", "part")

    def get_state(self) -> dict[str, Any]:
        """How it rebatches, parts handed out and the pipeline's state before them."""
        if self._partial is not None:
            pipeline_state, part = self._partial
        else:
            pipeline_state, part = self.pipeline.get_state(), self._pending_part
        return {"rebatch": {"mode": self.mode, "k": self.k}, "part": part,
                "parent": pipeline_state}

    def check_own(self, state: dict[str, Any]) -> None:
        saved = state["rebatch"]
        if saved != {"mode": self.mode, "k": self.k}:
            how = (f"{saved.get('mode')}={saved.get('k')}" if isinstance(saved, dict)
                   else repr(saved))
            raise StateError(
                f"state was saved by Rebatch({how}); this is Rebatch({self.mode}={self.k}). "
                "Restore into an identically built Rebatch.",
                field="rebatch",
            )
        part = state["part"]
        if isinstance(part, bool) or not isinstance(part, (int, np.integer)) \
                or not 0 <= part < self.k:
            raise StateError(
                f"state part={part!r} is out of range for Rebatch({self.mode}={self.k}) "
                f"(0..{self.k - 1}).", field="part",
            )
        self._close_live()  # the pass it was serving ends before the pipeline moves
        self._partial = None

    def restore_own(self, state: dict[str, Any]) -> None:
        """Make the next ``iter(rebatch)`` continue exactly where ``state`` was taken."""
        self._pending_part = int(state["part"])

    def __reduce__(self) -> tuple[Any, ...]:
        """``copy.deepcopy`` / ``pickle``: over a copy of the pipeline, at this state."""
        return (_restored, (self.pipeline, self.mode, self.k, self.get_state()))


def _restored(pipeline: Pipeline, mode: str, k: int, state: dict[str, Any]) -> Rebatch:
    """A ``Rebatch(pipeline, mode=k)`` continuing from ``state``."""
    node = Rebatch(pipeline, **{mode: k})
    node.set_state(state)
    return node


class RebatchIterator:
    """One pass of a :class:`Rebatch` (made by ``iter(rebatch)``)."""

    def __init__(self, owner: Rebatch) -> None:
        self._owner = owner

    def __repr__(self) -> str:
        inner = getattr(self, "_inner", None)
        return (f"<RebatchIterator of {self._owner!r}: "
                + (f"{inner!r}>" if inner is not None else "not started>"))

    def __reduce_ex__(self, protocol: Any) -> Any:
        """One pass, on this process's threads: refused by ``copy`` and ``pickle``."""
        raise TypeError(
            "A RebatchIterator cannot be copied or pickled: it is one pass of its Rebatch, "
            "run by this process's threads. Copy or pickle the Rebatch instead (it "
            "continues at this iterator's position), or save iterator.get_state() and "
            "restore it with set_state() on an identically built Rebatch.")

    def begin(self, inner: Any, skip: int) -> None:
        """Serve the pass of ``inner``, its first ``skip`` parts handed out already."""
        self._inner = inner
        self._skip = skip
        self._current: Batch | None = None  # the underlying batch being split
        self._parts: list[tuple[int, int]] = []
        self._before: dict[str, Any] | None = None
        self._next_part = 0
        self._closed = False
        self._stale = False  # ended by a newer iter(rebatch) or rebatch.set_state()

    @property
    def epoch(self) -> int:
        """The pass this iterator serves."""
        return self._inner.epoch

    def get_state(self) -> dict[str, Any]:
        """The owning Rebatch's state (see :meth:`Rebatch.get_state`)."""
        return self._owner.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` inside this iterator, as ``rebatch.set_state(state)``
        then ``iter(rebatch)`` would.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> def make():
            ...     src = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
            ...     return Rebatch(Pipeline(source=src, batch_size=2), split=2)
            >>> it = iter(make()); _ = next(it)
            >>> again = iter(make()); again.set_state(it.get_state())
            >>> [b["x"].tolist() for b in again]
            [[1], [2], [3]]
        """
        self._owner.set_state(state)
        self._owner._begin_pass(self)

    def __len__(self) -> int:
        """Batches left in this pass; ``TypeError`` when the pipeline's length is unknown."""
        owner = self._owner
        underlying = len(self._inner)
        if owner.mode == "group":
            return math.ceil(underlying / owner.k)
        source = owner.pipeline.source
        left = owner.pipeline.plan.end(source.epoch_size() or 0, 0) - source.index
        parts_left = len(self._parts) - self._next_part if self._current is not None else 0
        return parts_left + owner.batches_for(max(left, 0), underlying) - (
            self._skip if underlying else 0)

    def __iter__(self) -> RebatchIterator:
        return self

    def __enter__(self) -> RebatchIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop this pass early; a state taken afterwards still continues with the rest."""
        self._closed = True
        self._inner.close()

    def supersede(self) -> None:
        """End this pass for a newer one: its next ``next()`` raises ``StaleIteratorError``."""
        self.close()
        self._stale = True

    def __next__(self) -> Batch:
        if self._stale:
            raise StaleIteratorError(
                f"This iterator of {self._owner!r} was ended by a newer iter(rebatch) or "
                "rebatch.set_state(): one iterator per Rebatch is live at a time. Keep using "
                "the newest iterator, or build a second Rebatch over its own Pipeline for an "
                "independent pass."
            )
        if self._owner.mode == "group":
            return self._next_group()
        return self._next_part_of_batch()

    def _next_group(self) -> Batch:
        owner = self._owner
        owner._partial = None
        parts: list[Batch] = []
        for _ in range(owner.k):
            before = owner.pipeline.get_state() if parts else None
            try:
                parts.append(next(self._inner))
            except StopIteration:
                if before is not None:  # a state taken now restores to an empty pass
                    owner._partial = (before, 0)
                break
        if not parts:
            raise StopIteration
        return self._placed(concat_batches(parts, on_device=True))

    def _placed(self, batch: Batch) -> Batch:
        """``batch`` placed again with the pipeline's ``sharding=`` (slices lose it)."""
        placement = self._owner.pipeline.plan.placement
        return batch if placement is None else placement.place(batch, "Rebatch")

    def _next_part_of_batch(self) -> Batch:
        if self._closed:
            raise StopIteration
        if self._current is None or self._next_part >= len(self._parts):
            self._before = self._owner.pipeline.get_state()
            self._current = None
            batch = next(self._inner)  # StopIteration ends the pass
            count = batch_length(batch)
            size = self._owner.part_size
            assert size is not None
            self._parts = [(lo, min(lo + size, count)) for lo in range(0, count, size)]
            self._current = batch
            self._next_part, self._skip = min(self._skip, len(self._parts)), 0
            self._owner._pending_part = 0
            if self._next_part >= len(self._parts):
                return self._next_part_of_batch()
        lo, hi = self._parts[self._next_part]
        self._next_part += 1
        assert self._before is not None
        done = self._next_part >= len(self._parts)
        self._owner._partial = None if done else (self._before, self._next_part)
        return self._placed(_rows(self._current, lo, hi))
