"""``StatsLogger``: write ``pipeline.stats()`` every k batches to JSON lines or TensorBoard.

Every ``every`` batches it writes ``{"step", "time", "records_per_s", **pipeline.stats()}``
as a JSON line and/or TensorBoard scalars under ``prefix/...`` (the ``metrics`` extra).

Example:
    >>> import json, os, tempfile
    >>> import numpy as np
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(50, dtype=np.int32)})
    >>> pipeline = Pipeline(source=source, stages=[], batch_size=10)
    >>> path = os.path.join(tempfile.mkdtemp(), "stats.jsonl")
    >>> with StatsLogger(pipeline, every=2, jsonl_path=path) as logger:
    ...     for batch in logger.track(pipeline):
    ...         pass
    >>> [json.loads(line)["records"] for line in open(path)]
    [20, 40]
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from datarax.core.config import check_count
from datarax.core.errors import ConfigError
from datarax.core.spec import flatten_fields

T = TypeVar("T")


def flatten_numbers(tree: dict[str, Any], prefix: str) -> dict[str, float]:
    """Every int/float leaf of a nested dict as ``{"prefix/a/b": value}`` (others left out).

    Example:
        >>> flatten_numbers({"records": 4, "seconds": {"read": 0.5}, "bottleneck": "read"}, "d")
        {'d/records': 4.0, 'd/seconds/read': 0.5}
    """
    return {name: float(value) for name, value in flatten_fields(tree, f"{prefix}/").items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


class StatsLogger:
    """Snapshots of ``pipeline.stats()`` every ``every`` batches.

    ``pipeline``: anything with a ``stats()`` dict; give ``jsonl_path`` (appended) and/or
    ``tensorboard_dir``. Count batches with :meth:`step` or :meth:`track`.
    """

    def __init__(
        self,
        pipeline: Any,
        *,
        every: int = 100,
        jsonl_path: str | os.PathLike[str] | None = None,
        tensorboard_dir: str | os.PathLike[str] | None = None,
        prefix: str = "datarax",
    ) -> None:
        if not callable(getattr(pipeline, "stats", None)):
            raise ConfigError(
                "StatsLogger needs a pipeline with a stats() method, got "
                f"{type(pipeline).__name__}."
            )
        every = check_count(every, "StatsLogger every", 1, " (batches)")  # NumPy ints too
        if jsonl_path is None and tensorboard_dir is None:
            raise ConfigError(
                "StatsLogger writes nowhere: give jsonl_path='stats.jsonl' and/or "
                "tensorboard_dir='runs/data'."
            )
        self.pipeline = pipeline
        self.every = every
        self.prefix = prefix
        self.steps = 0
        self._jsonl = None
        if jsonl_path is not None:
            if os.path.isdir(jsonl_path) or os.fspath(jsonl_path).endswith(("/", os.sep)):
                raise ConfigError(
                    f"StatsLogger jsonl_path '{os.fspath(jsonl_path)}' is a folder; give a "
                    "file in it, e.g. jsonl_path='runs/data_stats.jsonl'."
                )
            folder = os.path.dirname(os.fspath(jsonl_path))
            if folder:  # as tensorboard_dir is: the folders of the path are made
                os.makedirs(folder, exist_ok=True)
            self._jsonl = open(jsonl_path, "a", encoding="utf-8")  # noqa: SIM115
        self._writer = None
        if tensorboard_dir is not None:
            from datarax.core.extras import require

            tensorboardx = require(
                "tensorboardX", extra="metrics", user="StatsLogger(tensorboard_dir=...)"
            )
            self._writer = tensorboardx.SummaryWriter(logdir=os.fspath(tensorboard_dir))
        self._last = (time.perf_counter(), self._records())
        self._closed = False

    def _records(self) -> int:
        return int(self.pipeline.stats().get("records", 0))

    def step(self, batches: int = 1) -> dict[str, Any] | None:
        """Count ``batches`` consumed batches; returns the snapshot when one was written."""
        batches = check_count(batches, "StatsLogger.step batches", 0)
        self._check_open()
        before = self.steps // self.every
        self.steps += batches
        if self.steps // self.every > before:
            return self.write()
        return None

    def track(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield from ``batches``, counting each with :meth:`step` (a ``break``-s batch too)."""
        for batch in batches:
            try:
                yield batch
            except GeneratorExit:  # the loop broke off (break, an error) after this batch
                if not self._closed:  # a logger closed meanwhile has nothing to count it in
                    self.step()
                raise
            self.step()

    def write(self) -> dict[str, Any]:
        """Write a snapshot now (at the current step) and return it."""
        self._check_open()
        stats = self.pipeline.stats()
        now = time.perf_counter()
        records = int(stats.get("records", 0))
        last_time, last_records = self._last
        elapsed = now - last_time
        rate = (
            (records - last_records) / elapsed if elapsed > 0 and records >= last_records else None
        )
        self._last = (now, records)
        snapshot = {"step": self.steps, "time": time.time(), "records_per_s": rate, **stats}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(snapshot) + "\n")
            self._jsonl.flush()
        if self._writer is not None:
            scalars = flatten_numbers(
                {k: v for k, v in snapshot.items() if k not in ("step", "time")}, self.prefix
            )
            for tag, value in scalars.items():
                self._writer.add_scalar(tag, value, global_step=self.steps)
            self._writer.flush()
        return snapshot

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "StatsLogger is closed (close() or the end of its with block); build a new "
                "StatsLogger to log again."
            )

    def close(self) -> None:
        """Flush and close the files; :meth:`step` and :meth:`write` then raise."""
        self._closed = True
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort during garbage collection
            pass

    def __enter__(self) -> StatsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
