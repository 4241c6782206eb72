"""Retrying a store's transient failures with exponential backoff, and counting them.

A failure is *transient* when the store throttles (HTTP 503 / 429, ``SlowDown``,
``Throttling``, ``reduce your request rate``), times out or drops the connection; a
missing object or a refused permission is not (it raises at once).

Example:
    >>> stats = StorageStats()
    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise OSError("503 SlowDown: reduce your request rate")
    ...     return "ok"
    >>> with_retries(flaky, "s3://b/k", RetryPolicy(initial_delay=0.0), stats)
    'ok'
    >>> stats.snapshot()["retries"], stats.snapshot()["throttled"]
    (2, 2)
"""

from __future__ import annotations

import dataclasses
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from datarax.errors import ConfigError

__all__ = ["RetryPolicy", "StorageStats", "is_throttle", "is_transient", "with_retries"]

T = TypeVar("T")
_THROTTLE = re.compile(r"SlowDown|Throttl|TooManyRequests|reduce your request rate|"
                       r"\b503\b|\b429\b|ServiceUnavailable|RequestLimitExceeded", re.I)
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
              ConfigError, KeyboardInterrupt)


def is_throttle(err: BaseException) -> bool:
    """Whether ``err`` says the store is throttling (503 / 429 / SlowDown)."""
    return bool(_THROTTLE.search(f"{type(err).__name__}: {err}"))


def is_transient(err: BaseException) -> bool:
    """Whether retrying ``err`` may succeed (not a missing object or a refused permission)."""
    if isinstance(err, _PERMANENT) or not isinstance(err, Exception):
        return False
    if isinstance(err, OSError) and getattr(err, "errno", None) in (2, 13):  # ENOENT, EACCES
        return False
    return True


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    Attempt ``k`` (from 1) waits ``min(max_delay, initial_delay * multiplier**(k-1))``,
    with up to 25 % random jitter, before trying again; after ``max_retries`` retries
    of one request the failure is raised.

    Example:
        >>> RetryPolicy().max_retries
        10
    """

    max_retries: int = 10
    initial_delay: float = 0.05
    max_delay: float = 5.0
    multiplier: float = 2.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
        return base * (1.0 + 0.25 * random.random())  # noqa: S311 - jitter, not security


class StorageStats:
    """Thread-safe counters of remote reading (a source's ``stats()["storage"]``).

    ``fetched`` / ``fetched_bytes``: files downloaded; ``cache_hits``: files found in the
    cache; ``retries``: requests retried (``throttled`` of them throttled); ``resumed``:
    downloads continued from the bytes already written after a dropped connection;
    ``evicted``: cache entries this process removed; ``failed``: files that could not be
    used (deleted, changed, unreadable); ``wait_s``: seconds readers waited for a file.
    """

    FIELDS = ("fetched", "fetched_bytes", "cache_hits", "retries", "throttled", "resumed",
              "evicted", "failed", "wait_s")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(self.FIELDS, 0)

    def add(self, field: str, amount: float = 1) -> None:
        with self._lock:
            self._values[field] += amount

    def snapshot(self) -> dict[str, Any]:
        """The counters now (``wait_s`` a float, the rest ints)."""
        with self._lock:
            return {k: (round(v, 6) if k == "wait_s" else int(v)) for k, v in self._values.items()}


def with_retries(call: Callable[[], T], what: str, policy: RetryPolicy, stats: StorageStats | None,
                 *, on_retry: Callable[[BaseException], None] | None = None) -> T:
    """``call()``, retried on transient failures per ``policy`` (counted in ``stats``).

    ``what`` (the URL) names the request in the error raised after the last retry;
    ``on_retry(err)`` runs before each retry.
    """
    attempt = 0
    while True:
        try:
            return call()
        except Exception as err:
            if not is_transient(err) or attempt >= policy.max_retries:
                if attempt and is_transient(err):
                    raise OSError(f"'{what}': still failing after {attempt} retries "
                                  f"({type(err).__name__}: {err}).") from err
                raise
            attempt += 1
            if stats is not None:
                stats.add("retries")
                if is_throttle(err):
                    stats.add("throttled")
            if on_retry is not None:
                on_retry(err)
            time.sleep(policy.delay(attempt))
