"""A picklable Rows whose row ``kill_at`` kills the process reading it (SIGKILL):
what a worker process killed mid-shard looks like. Imported by module name in the
spawned worker (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import os
import signal

import numpy as np

from datarax.dataset.rows import Rows


class KillerRows(Rows):
    def __init__(self, n: int, kill_at: int | None) -> None:
        self.length = n
        self.kill_at = kill_at
        self.description = "killer rows"

    def iter_rows(self, start, stop):
        for i in range(start, self.length if stop is None else stop):
            if i == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            yield {"x": np.full((2,), i, np.float32)}


class ParentKillerRows(Rows):
    """Rows read slowly (``delay`` s each) whose row ``kill_at`` kills the reading
    process's parent (SIGKILL): a conversion whose main process is killed while its
    worker processes write."""

    def __init__(self, n: int, kill_at: int, delay: float) -> None:
        self.length = n
        self.kill_at = kill_at
        self.delay = delay
        self.description = "parent killer rows"

    def iter_rows(self, start, stop):
        import time

        for i in range(start, self.length if stop is None else stop):
            if i == self.kill_at:
                os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(self.delay)
            yield {"x": np.full((2,), i, np.float32)}
