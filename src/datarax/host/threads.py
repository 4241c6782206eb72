"""Threads that work ahead of the consumer, and an opt-in to let them yield the CPU.

:func:`lower_read_ahead_priority` runs datarax's read-ahead threads a few ``nice`` steps
below the main thread (Linux only; see ``docs/devices.md``). XLA's compiler threads
inherit their creator's priority, so a pipeline worker lowers its own only after its
first batch. Imports neither JAX nor Flax; :mod:`datarax.core.threads` names these too.

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
import weakref
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
    """Lower the calling thread to :data:`BEHIND` nice steps below the main thread (never
    raise it); returns whether it changed."""
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
    """End a ``concurrent.futures`` pool without waiting (best effort, for ``__del__``)."""
    try:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001
        pass


def end_with_parent(parent: int) -> None:
    """Start a thread that ends this worker process once its parent is no longer ``parent``
    (it died: nobody is left to take what the worker makes)."""
    threading.Thread(target=_end_with, args=(parent,), name="datarax-parent-watch",
                     daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def kept_across_fork(method: str) -> weakref.WeakSet[Any]:
    """A set of live objects each of which a child of ``os.fork()`` calls ``method()`` on
    as it starts (POSIX): the parent's threads and worker processes are not the child's, so
    an object holding them must forget or redo their work there.

    Example:
        >>> live = kept_across_fork("forget_workers")
        >>> len(live)
        0
    """
    live: weakref.WeakSet[Any] = weakref.WeakSet()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: [getattr(o, method)() for o in list(live)])
    return live
