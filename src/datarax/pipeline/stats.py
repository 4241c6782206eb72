"""``PipelineStats``: where a pipeline's time goes, stage by stage.

Timers accumulate wall-clock seconds in the thread doing the work — the consumer's,
or with ``prefetch >= 1`` the pipeline's read-ahead thread (indexed sources: ``step``,
``compile`` and their ``transfer``; random-access host sources: ``read``,
``validate``, ``stages`` and ``transfer``):

* ``read`` — host sources: waiting for the next batch of records (reader threads, decode);
* ``validate`` — host sources: checking batches against ``element_spec()``;
* ``transfer`` — host sources without stages: host → device copies;
* ``stages`` — host sources: dispatching the compiled stages;
* ``step`` — indexed sources: dispatching the compiled step (positions → gather →
  stages); on the CPU backend this includes the computation itself;
* ``compile`` — indexed sources: the first call of each compiled step in the process
  (it traces and compiles, loads from datarax's store of compiled steps, or waits for
  the thread that compiles the first pass ahead), and of each
  ``Pipeline.scan`` program per ``length`` — start-up cost;
* ``wait`` — total time the consumer spent inside ``next()``.

Sources that keep counters of their own (remote files: their downloads) add them
under ``source``. Work that JAX runs asynchronously after dispatch is not attributed;
call ``block_until_ready`` on batches to fold it into ``wait``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TIMERS = ("read", "validate", "transfer", "stages", "step", "compile", "wait")


class _Timer:
    """The ``with`` block of :meth:`PipelineStats.timer` (a plain class: cheaper per use
    than a generator-based context manager)."""

    __slots__ = ("_stats", "_name", "_start")

    def __init__(self, stats: PipelineStats, name: str) -> None:
        self._stats = stats
        self._name = name
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._stats.seconds[self._name] += time.perf_counter() - self._start


class PipelineStats:
    """Accumulated per-stage seconds plus batch and record counts.

    Example:
        >>> stats = PipelineStats()
        >>> with stats.timer("read"):
        ...     pass
        >>> stats.count(batch_records=4)
        >>> snapshot = stats.as_dict()
        >>> snapshot["batches"], snapshot["records"]
        (1, 4)
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Zero every timer and counter."""
        self.seconds = dict.fromkeys(TIMERS, 0.0)
        self.batches = 0
        self.records = 0
        self.kept = 0
        self.dropped = 0

    def timer(self, name: str) -> _Timer:
        """Add the time spent in the ``with`` block to timer ``name`` (also when it raises)."""
        return _Timer(self, name)

    def count(self, batch_records: int) -> None:
        """Record one batch of ``batch_records`` records handed out."""
        self.batches += 1
        self.records += batch_records

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """Leave out of the counts the batches handed out inside the block (time counts)."""
        counts = (self.batches, self.records, self.kept, self.dropped)
        try:
            yield
        finally:
            self.batches, self.records, self.kept, self.dropped = counts

    def count_filtered(self, kept: int, dropped: int) -> None:
        """A FilterOperator's tally for one batch handed out: records kept, and records
        passed over since the previous batch."""
        self.kept += kept
        self.dropped += dropped

    def as_dict(self, source_stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """Totals, per-batch milliseconds and the steady-state stage that took longest."""
        seconds = {k: round(v, 6) for k, v in self.seconds.items()}
        per_batch = {
            k: round(1000 * v / self.batches, 4) if self.batches else 0.0
            for k, v in self.seconds.items()
        }
        inner = {k: v for k, v in self.seconds.items() if k not in ("wait", "compile")}
        bottleneck = max(inner, key=inner.__getitem__) if any(inner.values()) else None
        out: dict[str, Any] = {
            "batches": self.batches,
            "records": self.records,
            "seconds": seconds,
            "ms_per_batch": per_batch,
            "bottleneck": bottleneck,
        }
        if self.kept or self.dropped:
            out["filter"] = {"kept": self.kept, "dropped": self.dropped}
        if source_stats:
            out["source"] = source_stats
        return out
