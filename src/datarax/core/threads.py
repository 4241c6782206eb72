"""Threads that work ahead of the consumer yield the CPU to it.

Invariant: every thread datarax starts to read, decode or compute ahead of the
training loop (a pipeline's read-ahead worker, a host reader's threads) runs at a
lower OS scheduling priority than the loop's own thread. When there are cores to
spare this changes nothing; when there are not (a laptop, a 2-core VM, a host whose
cores also feed an accelerator), the loop's thread runs as soon as it wakes from its
train step instead of waiting for a slice of a core behind the read-ahead work, which
is what lets that work hide behind the step. On 2 CPU cores it took the share of W1's
data time hidden behind a simulated train step from 0-62% to 92% (see
``docs/devices.md``).

Linux only, where ``setpriority`` applies to one thread; elsewhere (and where the OS
refuses) the thread keeps its priority. A thread inherits its creator's priority, and
XLA starts its compiler threads on first use: so the pipeline's worker lowers its own
only once its first batch is made (that one may compile), lest the process's compiler
threads run behind for good.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

#: how much less priority (``nice`` steps) a thread working ahead gets
BEHIND = 10


def run_behind_consumer() -> bool:
    """Run the calling thread :data:`BEHIND` nice steps below the process's main
    thread (the training loop's, as a rule); never raise it.

    Call it first thing in a thread that works ahead of the consumer (also as a
    ``ThreadPoolExecutor`` ``initializer``). Relative to the process, not to the
    calling thread, because a thread inherits its creator's priority (a host reader's
    threads are started by the pipeline's worker). Returns whether it changed.
    """
    if not sys.platform.startswith("linux"):  # elsewhere PRIO_PROCESS would name a process
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
