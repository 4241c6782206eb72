"""Threads that work ahead of the consumer, and an opt-in to let them yield the CPU.

Defined in :mod:`datarax.host.threads` (no JAX there: decode worker processes start
these threads too) and named here, their documented home.

Example:
    >>> lower_read_ahead_priority(0)  # the default: threads keep their priority
    >>> run_behind_consumer()
    False
"""

from __future__ import annotations

from typing import Any

from datarax.host import threads as _home
from datarax.host.threads import lower_read_ahead_priority, run_behind_consumer

__all__ = ["BEHIND", "lower_read_ahead_priority", "run_behind_consumer"]


def __getattr__(name: str) -> Any:
    if name == "BEHIND":  # the live setting, kept in one place
        return _home.BEHIND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
