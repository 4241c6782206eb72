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
