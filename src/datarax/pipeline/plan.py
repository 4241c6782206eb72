"""What a pass reads of its pipeline, handed to it by argument.

:class:`PipelinePlan` is the frozen description; :class:`PipelineSession` the pipeline
object's Python bookkeeping; :class:`PassContext` bundles them with the source, stages
and keys, so passes never import the pipeline module.

Example:
    >>> plan = PipelinePlan(batch_size=4, drop_remainder=True, prefetch=2, check_finite=False)
    >>> plan.batches(10), plan.end(10, 0)  # records of 10 handed out: the remainder dropped
    (2, 8)
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

from flax import nnx

from datarax.core.errors import ConfigError
from datarax.core.lengths import why_no_length
from datarax.core.module import HostState
from datarax.core.operator import RecordFilter
from datarax.core.reading import Reading
from datarax.core.share import Share
from datarax.pipeline.pass_reuse import PassReuse, PlacedLeaves
from datarax.pipeline.stats import PipelineStats
from datarax.sharding.placement import BatchPlacement


def passed(batch: Any) -> Any:
    """Stands in for a stage that already ran, keeping later stages' positions (and keys)."""
    return batch


def filter_position(stages: Any) -> int | None:
    """Where the one ``FilterOperator`` stands in ``stages`` (None without one).

    >>> from datarax.operators import FilterOperator
    >>> filter_position([passed, FilterOperator(predicate=lambda el: True)])
    1
    """
    found = [i for i, s in enumerate(stages) if isinstance(s, RecordFilter)]
    if len(found) > 1:
        raise ConfigError(
            f"Pipeline stages {found} are all FilterOperators; give one FilterOperator "
            "whose predicate combines the conditions (e.g. a(el) & b(el))."
        )
    return found[0] if found else None


@dataclass(frozen=True)
class PipelinePlan:
    """What an iterator needs to know of its pipeline (read-only).

    Attributes:
        batch_size: records per batch.
        drop_remainder: drop each epoch's short last batch.
        prefetch: compiled batches dispatched ahead of the one being consumed.
        check_finite: refuse batches holding NaN or inf.
        placement: where batches are placed (``sharding=``), None for the default device.
        pad_remainder: pad the short last batch and add a boolean ``"valid"`` field.
        stages_on: where the compiled steps run, ``"device"`` or ``"host"``.
        reading: how the source is read (:func:`~datarax.core.reading.reading_of`).
    """

    batch_size: int
    drop_remainder: bool
    prefetch: int
    check_finite: bool
    placement: BatchPlacement | None = None
    pad_remainder: bool = False
    stages_on: str = "device"
    reading: Reading = Reading(None, None)

    def __post_init__(self) -> None:
        for name in ("drop_remainder", "check_finite", "pad_remainder"):  # np.True_ -> True
            object.__setattr__(self, name, bool(getattr(self, name)))

    def batches(self, records: int) -> int:
        """Batches that ``records`` records make."""
        if self.drop_remainder:
            return records // self.batch_size
        return math.ceil(records / self.batch_size)

    def end(self, records: int, at: int) -> int:
        """Where a pass over ``records`` positions, read from ``at``, stops handing out:
        ``records``, or with ``drop_remainder`` the end of the last full batch from ``at``.

        >>> plan = PipelinePlan(batch_size=4, drop_remainder=True, prefetch=2, check_finite=False)
        >>> plan.end(10, 0), plan.end(10, 1), plan.end(12, 1)
        (8, 9, 9)
        """
        if not self.drop_remainder or at >= records:
            return records
        return at + (records - at) // self.batch_size * self.batch_size


class PipelineSession(HostState):
    """Python-only bookkeeping of one Pipeline object: never state, never structure
    (a :class:`~datarax.core.module.HostState`)."""

    def __init__(self, anchor: Any = None) -> None:
        self.anchor = anchor  # the Variable that tells whose session this is (Pipeline)
        self.live: weakref.ref[Any] | None = None  # the live iterator
        self.left: tuple[int, int, int] | None = None  # where the last iterator left the source
        self.stepper: Any = None  # the iterator step() serves from
        # this process's share of the epoch a restore on another process count re-split
        self.resplit_share: Share | None = None
        self.host_inputs = PlacedLeaves()  # the source's columns on the CPU (stages_on="host")
        self.pass_reuse = PassReuse()  # what the last indexed pass leaves to the next
        self.stats = PipelineStats()
        self.ahead: Any = None  # the first pass compiled ahead (pipeline.compile_ahead)
        self.share: tuple[int, int, bool] | None = None  # (index, count, padded) it set

    def __reduce__(self) -> tuple[Any, ...]:
        """A pickled pipeline gets a fresh session, as ``nnx.clone`` does."""
        return (PipelineSession, ())

    def drop_reuse(self) -> None:
        """Drop what the last pass left to the next (it may hold tracers)."""
        worker = self.pass_reuse.parked()
        if worker is not None:
            worker.stop()
        self.pass_reuse = PassReuse()

    def live_iterator(self) -> Any:
        """The live iterator, or None."""
        return self.live() if self.live is not None else None

    def adopt(self, iterator: Any) -> None:
        """Make ``iterator`` the live one, ending the one it replaces."""
        if self.ahead is not None:  # what compiling ahead met is reported now
            self.ahead, ahead = None, self.ahead
            ahead.pass_started()
        live = self.live_iterator()
        if live is not None and live is not iterator:
            live.supersede()
        self.live = weakref.ref(iterator)

    def note_left(self, source: Any) -> None:
        """An iterator moved ``source``: remember where it stands."""
        self.left = (source.epoch, source.index, source.datarax_position.restores)

    def stop_here(self, source: Any) -> None:
        """As if an iterator had stopped where ``source`` stands: the next pass is the
        next epoch (after a re-split share's start: the epoch after the share's)."""
        share = self.resplit_share
        if share is not None and (source.epoch, source.index) == (share.epoch, 0):
            self.resplit_share = None
            source.seek(share.epoch + 1, 0)
        self.note_left(source)

    def next_pass(self, source: Any) -> tuple[int, int | None]:
        """``(epoch, resume_at)`` of the next ``iter()``: the source's position, continued,
        unless an iterator stopped there (``break``): then the next epoch."""
        check_own_share(self.share, source)
        if self.left != (source.epoch, source.index, source.datarax_position.restores):
            if source.direct_pass_ended():
                return source.epoch + 1, None
            return source.epoch, source.index
        return source.epoch + (1 if source.index > 0 else 0), None

    def resplit(self, epoch: int) -> Share | None:
        """This process's re-split share of ``epoch`` (a restore on another process
        count), else None."""
        share = self.resplit_share
        return share if share is not None and share.epoch == epoch else None


def check_own_share(share: tuple[int, int, bool] | None, source: Any) -> None:
    """Refuse a pass when ``source`` no longer serves the ``share`` its pipeline set (a
    later Pipeline over the same source set its own).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(4)})
        >>> source.set_shard(0, 2)
        >>> check_own_share((1, 2, False), source)
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: This Pipeline was built to serve shard 1 of 2 of its MemorySource, which now serves shard 0 of 2: a Pipeline built later over the same source object set its own shard (a source serves one share at a time). Build each pipeline over its own source (copy.deepcopy(source) copies one at its position).
    """
    shard = source.shard
    if share is None or (shard.index, shard.count, shard.padded) == share:
        return
    def name(index: int, count: int, padded: bool) -> str:
        return f"shard {index} of {count}" + (" (padded)" if padded else "")
    raise ConfigError(
        f"This Pipeline was built to serve {name(*share)} of its {type(source).__name__}, "
        f"which now serves {name(shard.index, shard.count, shard.padded)}: a Pipeline built "
        "later over the same source object set its own shard (a source serves one share "
        "at a time). Build each pipeline over its own source (copy.deepcopy(source) "
        "copies one at its position)."
    )


@dataclass(frozen=True)
class PassContext:
    """A pipeline's parts, as its passes read them (built by ``Pipeline`` per call)."""

    plan: PipelinePlan
    source: Any
    stages: Any
    key: nnx.Variable
    key_count: nnx.Variable
    session: PipelineSession

    @property
    def stats(self) -> PipelineStats:
        return self.session.stats

    @property
    def reading(self) -> Reading:
        """How the source is read (the plan's)."""
        return self.plan.reading

    def key_pair(self) -> tuple[Any, Any]:
        """``(key, count)``: the pipeline key is ``fold_in(key, count)`` (made in-step)."""
        return self.key.get_value(), self.key_count.get_value()

    def resplit(self, epoch: int) -> Share | None:
        """The session's :meth:`PipelineSession.resplit` of ``epoch``."""
        return self.session.resplit(epoch)

    def epoch_size(self, what: str, filtered: str) -> int:
        """Records in one epoch of the source, for ``len()``; ``TypeError`` (worded by
        ``filtered`` or ``what``) when unknown."""
        if filter_position(self.stages) is not None:
            raise TypeError(f"{filtered}: how many records the FilterOperator keeps is "
                            "known only once they are read.")
        size = self.source.epoch_size()
        if size is None:
            raise TypeError(f"{what} is unknown: {why_no_length(self.source)}")
        return size

    def batches_left(self, epoch: int, at: int) -> int:
        """Batches pass ``epoch`` still hands out from position ``at``."""
        share = self.resplit(epoch)
        size = share.size(len(self.source)) if share is not None else self.source.epoch_size()
        return self.plan.batches(max(self.plan.end(size, at) - at, 0))
