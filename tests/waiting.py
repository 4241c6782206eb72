"""Waiting for another thread or process without a fixed short sleep (``tests/conftest.py``
puts this folder on ``sys.path``).

``eventually(condition)`` polls ``condition()`` until it returns something true, or until
``timeout`` seconds pass (60 by default: CI runs two xdist workers on two loaded cores,
where a thread may wait seconds for its turn), and returns the last value either way:
the test then asserts on it, so a failure still says what was seen. A passing test waits
no longer than the condition takes.

``threads_started_since(before)`` lists the threads alive now that were not in ``before``
(a set of ``threading.enumerate()``): what a test started, not what other tests left.

Example:
    >>> eventually(lambda: 3)
    3
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 60.0


def eventually(condition: Callable[[], T], timeout: float = TIMEOUT,
               interval: float = 0.01) -> T:
    """``condition()``'s first true value, or its value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def threads_started_since(before: Iterable[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not alive in ``before``."""
    earlier = set(before)
    return [t for t in threading.enumerate() if t not in earlier and t.is_alive()]
