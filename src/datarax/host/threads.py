"""Threads that work ahead of the consumer, and an opt-in to let them yield the CPU.

By default datarax's threads keep the priority they were started with. On a machine
short of cores the training loop's thread may wait behind read-ahead work;
:func:`lower_read_ahead_priority` makes every thread datarax starts to read, decode or
compute ahead of the loop run a few ``nice`` steps below the process's main thread
(Linux only; elsewhere, or where the OS refuses, nothing changes; measurements in
``docs/devices.md``). A thread inherits its creator's priority, and XLA starts its
compiler threads on first use, so a pipeline's worker lowers its own only once its
first batch is made.

A worker process started by datarax ends with its parent (:func:`end_with_parent`).

Imports neither JAX nor Flax; :mod:`datarax.core.threads` names these too.

Example:
    >>> lower_read_ahead_priority(0)  # the default: threads keep their priority
    >>> run_behind_consumer()
    False
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

#: how many ``nice`` steps below the main thread read-ahead threads run (0: unchanged)
BEHIND = 0

#: seconds between a worker's checks that its parent process is still there
PARENT_CHECK_S = 0.2


def lower_read_ahead_priority(steps: int = 10) -> None:
    """Run the read-ahead threads datarax starts from now on ``steps`` nice steps below
    the process's main thread (Linux; ``0`` turns it off again)."""
    global BEHIND
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 19:
        raise ValueError(f"lower_read_ahead_priority takes an int from 0 to 19, got {steps!r}.")
    BEHIND = steps


def run_behind_consumer() -> bool:
    """Lower the calling thread (one that works ahead of the consumer) to :data:`BEHIND`
    nice steps below the process's main thread, if :func:`lower_read_ahead_priority`
    asked for it; never raise it. Returns whether it changed."""
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


def end_with_parent(parent: int) -> None:
    """Start a thread that ends this worker process as soon as its parent is no longer
    ``parent`` (it died and the worker was handed to another process): nobody is left
    to take what the worker makes, or to finish it (nor should it still write then)."""
    threading.Thread(target=_end_with, args=(parent,), name="datarax-parent-watch",
                     daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)
