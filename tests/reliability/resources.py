"""Measuring what a loop leaves behind: live threads and resident memory (RSS)."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, from ``/proc/self/statm`` (field 2, pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@dataclass(frozen=True)
class Leftovers:
    threads_before: int
    threads_after: int
    rss_warm: int  # after the warm-up rounds
    rss_mid: int  # half-way through the measured rounds
    rss_after: int

    @property
    def growth_second_half(self) -> int:
        return self.rss_after - self.rss_mid

    @property
    def growth(self) -> int:
        return self.rss_after - self.rss_warm


def measure(body: Callable[[int], None], rounds: int, warmup: int = 50) -> Leftovers:
    """Run ``body(i)`` ``warmup`` then ``rounds`` times; report threads and RSS.

    ``threads_after`` counts the threads alive before the measured rounds that are still
    alive, plus every thread the rounds started and left running: threads of earlier
    work ending meanwhile (a dropped iterator collected late) do not count as a change.
    """
    for i in range(warmup):
        body(i)
    gc.collect()
    before = set(threading.enumerate())
    rss_warm = rss_bytes()
    rss_mid = rss_warm
    for i in range(rounds):
        body(warmup + i)
        if i == rounds // 2:
            gc.collect()
            rss_mid = rss_bytes()
    gc.collect()
    settle_threads(before)
    return Leftovers(len(before), len(before) + len(new_threads(before)), rss_warm, rss_mid,
                     rss_bytes())


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not alive in ``before``."""
    return [t for t in threading.enumerate() if t not in before]


def settle_threads(before: set[threading.Thread], timeout: float = 60.0) -> None:
    """Give threads other libraries start and stop on their own (e.g. a thread pool
    winding down on a loaded machine) up to ``timeout`` seconds to end: until no thread
    is alive that was not in ``before`` (at once when none is; a loaded machine may keep
    an ending thread waiting for a core for seconds)."""
    import time

    deadline = time.monotonic() + timeout
    while new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.01)
