"""Threads that work ahead of the consumer, and an opt-in to let them yield the CPU.

By default datarax's threads keep the priority they were started with. On a machine
short of cores (a laptop, a 2-core VM, a host whose cores also feed an accelerator)
the training loop's thread, waking from its train step, may wait for a slice of a core
behind the read-ahead work; :func:`lower_read_ahead_priority` asks that every thread
datarax starts to read, decode or compute ahead of the loop (a pipeline's read-ahead
worker, a host reader's threads) run a few ``nice`` steps below the process's main
thread. On 2 CPU cores that took the share of a pipeline's data time hidden behind a
simulated train step from 0-62% to 85-92% (see ``docs/devices.md``).

Linux only, where ``setpriority`` applies to one thread; elsewhere (and where the OS
refuses) a thread keeps its priority. A thread inherits its creator's priority, and XLA
starts its compiler threads on first use: so the pipeline's worker lowers its own only
once its first batch is made (that one may compile).

Example:
    >>> lower_read_ahead_priority(0)  # the default: threads keep their priority
    >>> run_behind_consumer()
    False
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

#: how many ``nice`` steps below the main thread read-ahead threads run (0: unchanged)
BEHIND = 0


def lower_read_ahead_priority(steps: int = 10) -> None:
    """Run the read-ahead threads datarax starts from now on ``steps`` nice steps below
    the process's main thread (Linux; ``0`` turns it off again)."""
    global BEHIND
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 19:
        raise ValueError(f"lower_read_ahead_priority takes an int from 0 to 19, got {steps!r}.")
    BEHIND = steps


def run_behind_consumer() -> bool:
    """Lower the calling thread to :data:`BEHIND` nice steps below the process's main
    thread, if :func:`lower_read_ahead_priority` asked for it; never raise it.

    Called first thing in a thread that works ahead of the consumer (also as a
    ``ThreadPoolExecutor`` ``initializer``). Relative to the process, not to the
    calling thread, because a thread inherits its creator's priority. Returns whether
    it changed.
    """
    if BEHIND == 0 or not sys.platform.startswith("linux"):
        return False
    try:
        thread = threading.get_native_id()
        target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + BEHIND)
        if os.getpriority(os.PRIO_PROCESS, thread) >= target:
            return False
        os.setpriority(os.PRIO_PROCESS, thread, target)
    except (AttributeError, OSError):  # no per-thread priority here, or not allowed
        return False
    return True


def drop_pool(pool: Any) -> None:
    """End a ``concurrent.futures`` pool without waiting (best effort, for ``__del__``:
    at interpreter exit the pool's own machinery may already be gone)."""
    try:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001
        pass
