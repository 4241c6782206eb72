"""Picklable Rows whose row ``kill_at`` kills a process (SIGKILL): what a worker process
killed mid-shard, or a conversion whose main process is killed while its workers write,
looks like; and a list of records whose item ``kill_at`` kills the one process writing it.
Imported by module name in the spawned worker (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np

from datarax.dataset.rows import Rows


class KillerRows(Rows):
    """Rows ``{"x": [i, i]}``, each read after ``delay`` s, whose row ``kill_at`` kills the
    process reading it, or with ``parent=True`` that process's parent."""

    def __init__(self, n: int, kill_at: int | None, *, delay: float = 0.0,
                 parent: bool = False) -> None:
        self.length = n
        self.kill_at = kill_at
        self.delay = delay
        self.parent = parent
        self.description = "parent killer rows" if parent else "killer rows"

    def iter_rows(self, start, stop):
        for i in range(start, self.length if stop is None else stop):
            # a parent is killed only from a worker process (the main process's parent is
            # the test run itself)
            if i == self.kill_at and not (self.parent and multiprocessing.parent_process() is None):
                os.kill(os.getppid() if self.parent else os.getpid(), signal.SIGKILL)
            if self.delay:
                time.sleep(self.delay)
            yield {"x": np.full((2,), i, np.float32)}


class ParentKillerRows(KillerRows):
    """Rows read slowly (``delay`` s each) whose row ``kill_at`` kills the reading
    process's parent when that is a worker process: a conversion whose main process is
    killed while its worker processes write."""

    def __init__(self, n: int, kill_at: int, delay: float) -> None:
        super().__init__(n, kill_at, delay=delay, parent=True)


def numbered(n: int, bad: int | None = None) -> list[dict]:
    """Records ``{"x": [i, i], "name": "r<i>"}`` for ``i < n``; row ``bad`` has 5 x values."""
    records = [{"x": np.full((2,), i, np.float32), "name": f"r{i}"} for i in range(n)]
    if bad is not None:
        records[bad] = {"x": np.zeros(5, np.float32), "name": "bad"}
    return records


class KillingList(list):
    """A list of records whose item ``kill_at`` kills (SIGKILL) the process reading it:
    a one-process conversion killed part-way."""

    kill_at: int | None = None

    def __getitem__(self, i):
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)
