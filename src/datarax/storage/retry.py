"""Retrying a store's transient failures with exponential backoff, and counting them.

A failure is *transient* only when it says so: throttling or a store's 5xx, a timeout, or a
connection refused, reset or dropped. Anything else (a missing object, a refused
permission, a programming error) raises after one attempt, the URL in its notes.

A request's retries share a time budget (``RetryPolicy.budget_s``: 60 s, or
``DATARAX_RETRY_BUDGET`` seconds): a retry starts only when it can end within the budget,
judged by the longest attempt so far, so a store that cannot be reached fails within it.

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
    >>> is_transient(ConnectionResetError()), is_transient(TypeError("bad argument"))
    (True, False)
"""

from __future__ import annotations

import dataclasses
import errno
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from datarax.errors import ConfigError, DataraxError, error_chain
from datarax.host.counts import check_count
from datarax.host.settings import env_seconds

__all__ = ["BUDGET_ENV", "DEFAULT_BUDGET_S", "RetriesExhaustedError", "RetryPolicy",
           "StorageStats", "default_budget", "is_access_refused", "is_throttle", "is_transient",
           "with_retries"]

BUDGET_ENV = "DATARAX_RETRY_BUDGET"
DEFAULT_BUDGET_S = 60.0

T = TypeVar("T")
_THROTTLE_TEXT = (r"SlowDown|Throttl|TooManyRequests|reduce your request rate|\b503\b|\b429\b|"
                  r"ServiceUnavailable|RequestLimitExceeded")
# what a store or an HTTP stack says when trying again later may work: throttling too
# (both patterns are compiled by ``re`` at their first error, not at import)
_TRANSIENT_TEXT = (
    _THROTTLE_TEXT + r"|\b(500|502|504|408)\b|Service Unavailable|InternalError|"
    r"Internal Server Error|Bad Gateway|Gateway Time-?out|RequestTimeout|timed out|"
    r"connection (was )?(reset|aborted|closed|refused|dropped)|payload is not completed|"
    r"incomplete read")
# exception classes (matched by name along the class hierarchy, so the optional HTTP
# stacks need not be imported) that mean a dropped connection or a timeout
_TRANSIENT_CLASSES = frozenset({
    "ConnectionError",        # builtins (reset, aborted, refused, broken pipe), botocore, requests
    "TimeoutError",           # builtins / asyncio, s3fs RequestTimeout, aiohttp ServerTimeoutError
    "Timeout",                # requests
    "HTTPClientError",        # botocore: connection closed, read timeout, response streaming
    "IncompleteReadError",    # botocore
    "IncompleteRead",         # http.client
    "ClientConnectionError",  # aiohttp: server disconnected, connector errors
    "ClientPayloadError",     # aiohttp: body cut short
    "FSTimeoutError",         # fsspec
    "ProtocolError",          # urllib3
    "ChunkedEncodingError",   # requests
    "TransportError",         # google-auth
})
_NEVER_CLASSES = frozenset({"SSLError", "SSLCertVerificationError", "CertificateError"})
_TRANSIENT_ERRNO = frozenset(
    getattr(errno, name) for name in (
        "EAGAIN", "EBUSY", "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE",
        "ENETDOWN", "ENETUNREACH", "ENETRESET", "EHOSTDOWN", "EHOSTUNREACH", "EREMOTEIO")
    if hasattr(errno, name))
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                              "RequestTimeoutException", "InternalError", "ServiceUnavailable",
                              "RequestLimitExceeded", "TooManyRequestsException",
                              "TooManyRequests"})
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
              NotADirectoryError, DataraxError)
# programming errors: never a store's transient state, whatever their message says
_PROGRAMMING = (TypeError, ValueError, AttributeError, LookupError, AssertionError,
                ArithmeticError, NameError, ImportError, NotImplementedError, RecursionError)


# a client that cannot sign or authenticate (credentials missing, partial, expired), by class
# name along the hierarchy: botocore, google-auth
_CREDENTIAL_CLASSES = frozenset({
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
    "NoAuthTokenError", "TokenRetrievalError", "UnauthorizedSSOTokenError", "SSOTokenLoadError",
    "DefaultCredentialsError", "RefreshError",
})
# a store's answer that it refuses the request's identity or signature
_REFUSED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "InvalidAccessKeyId",
                            "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
                            "InvalidToken", "AllAccessDisabled", "Forbidden", "Unauthorized"})


def is_access_refused(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says access is refused: permission
    denied (401 / 403, ``AccessDenied``), or credentials missing, partial or expired.

    Example:
        >>> is_access_refused(PermissionError("Access Denied")), is_access_refused(OSError("503"))
        (True, False)
    """
    for current in error_chain(err):
        if isinstance(current, PermissionError) \
                or {cls.__name__ for cls in type(current).__mro__} & _CREDENTIAL_CLASSES:
            return True
        status, code = _status(current)
        if status in (401, 403) or code in _REFUSED_CODES:
            return True
    return False


def is_throttle(err: BaseException) -> bool:
    """Whether ``err`` says the store is throttling (503 / 429 / SlowDown)."""
    return bool(re.search(_THROTTLE_TEXT, f"{type(err).__name__}: {err}", re.I))


def _status(err: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and the store's error code ``err`` carries, when it carries them."""
    response = getattr(err, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        meta = response.get("ResponseMetadata") or {}
        code = (response.get("Error") or {}).get("Code")
        status = meta.get("HTTPStatusCode")
        return (status if isinstance(status, int) else None), (str(code) if code else None)
    for name in ("status", "status_code", "code"):  # aiohttp, requests, gcsfs HttpError
        value = getattr(err, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value, None
    return None, None


def _transient_one(err: BaseException) -> bool | None:
    """True / False when ``err`` itself decides, None when it says nothing either way."""
    names = {cls.__name__ for cls in type(err).__mro__}
    if isinstance(err, _PERMANENT) or names & _NEVER_CLASSES:
        return False
    if names & _TRANSIENT_CLASSES:
        return True
    status, code = _status(err)
    if status is not None or code is not None:
        return status in _TRANSIENT_STATUS or code in _TRANSIENT_CODES
    if isinstance(err, _PROGRAMMING):
        return False
    if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNO:
        return True
    return None


def is_transient(err: BaseException) -> bool:
    """Whether retrying ``err`` may succeed (see the module docstring).

    Example:
        >>> is_transient(OSError("503 SlowDown")), is_transient(PermissionError("denied"))
        (True, False)
    """
    if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit
        return False
    for current in error_chain(err, context=False):  # a wrapper, then its causes
        verdict = _transient_one(current)
        if verdict is not None:
            return verdict
    if isinstance(err, _PROGRAMMING) or type(err).__module__ == "builtins" \
            and not isinstance(err, OSError):
        return False
    return bool(re.search(_TRANSIENT_TEXT, str(err), re.I))


def default_budget() -> float:
    """The failure budget in seconds: ``DATARAX_RETRY_BUDGET`` when set, else 60.

    Raises:
        ConfigError: the variable is not a number of seconds >= 0.
    """
    return env_seconds(BUDGET_ENV, DEFAULT_BUDGET_S,
                       "how long a failing request to the store may be retried")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Retry ``k`` (from 1) waits ``min(max_delay, initial_delay * multiplier**(k-1))`` plus up
    to 25 % jitter; after ``max_retries`` retries, or when the next retry could not end
    within ``budget_s`` (default ``DATARAX_RETRY_BUDGET``, 60 s), the failure is raised.
    ``budget_s`` also sets the filesystems' connect and read timeouts.

    Example:
        >>> policy = RetryPolicy(budget_s=60)
        >>> policy.max_retries, policy.connect_timeout_s, policy.read_timeout_s
        (10, 3.0, 15.0)
    """

    max_retries: int = 10
    initial_delay: float = 0.05
    max_delay: float = 5.0
    multiplier: float = 2.0
    budget_s: float = dataclasses.field(default_factory=default_budget)

    def __post_init__(self) -> None:
        # checked here, not at the first failure mid-epoch; NumPy numbers as Python ones
        object.__setattr__(self, "max_retries", check_count(
            self.max_retries, "RetryPolicy max_retries", 0, " (retries of one request)"))
        for name, least in (("initial_delay", 0.0), ("max_delay", 0.0), ("multiplier", 1.0),
                            ("budget_s", 0.0)):
            value = getattr(self, name)
            ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
                value, (bool, np.bool_)) and least <= float(value) < float("inf")
            if not ok:
                unit = "the factor each retry's delay grows by" if least else "seconds"
                raise ConfigError(f"RetryPolicy {name} must be a finite number >= {least:g} "
                                  f"({unit}), got {value!r}.")
            object.__setattr__(self, name, float(value))

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
        return base * (1.0 + 0.25 * random.random())  # noqa: S311 - jitter, not security

    @property
    def connect_timeout_s(self) -> float:
        """Seconds one attempt may wait to connect: ``budget_s / 20``, within 0.1-5 s."""
        return min(5.0, max(0.1, self.budget_s / 20))

    @property
    def read_timeout_s(self) -> float:
        """Seconds one attempt may wait for the next bytes of an answer: ``budget_s / 4``,
        within 0.5-15 s (a slow transfer that keeps sending is never cut)."""
        return min(15.0, max(0.5, self.budget_s / 4))


class StorageStats:
    """Thread-safe counters of remote reading (a source's ``stats()["storage"]``)."""

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


class RetriesExhaustedError(OSError):
    """A transient failure that outlasted the retries of :func:`with_retries`: ``attempts``
    made in ``seconds``, within a budget of ``budget_s``."""

    def __init__(self, message: str, attempts: int = 0, seconds: float = 0.0,
                 budget_s: float = 0.0) -> None:
        super().__init__(message)
        self.attempts, self.seconds, self.budget_s = attempts, seconds, budget_s

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.attempts, self.seconds, self.budget_s))


def with_retries(call: Callable[[], T], what: str | Callable[[], str], policy: RetryPolicy,
                 stats: StorageStats | None,
                 *, on_retry: Callable[[BaseException], None] | None = None) -> T:
    """``call()``, retried on transient failures per ``policy`` (counted in ``stats``);
    ``what`` (the URL, or a function of the one that failed last) names the request in
    errors, ``on_retry(err)`` runs before a retry."""
    attempt = 0
    started = time.monotonic()
    longest = 0.0
    while True:
        began = time.monotonic()
        try:
            return call()
        except Exception as err:
            now = time.monotonic()
            name = what() if callable(what) else what
            longest = max(longest, now - began)
            transient = is_transient(err)
            if not transient:
                err.add_note(f"datarax: while reading '{name}' (not retried: "
                             f"{type(err).__name__} is not a transient failure of the store)")
                raise
            if not policy.max_retries:  # retries turned off
                err.add_note(f"datarax: while reading '{name}' (retries are off)")
                raise
            delay = policy.delay(attempt + 1)
            spent = now - started
            if attempt >= policy.max_retries or spent + delay + longest > policy.budget_s:
                why = (f"all {policy.max_retries} retries" if attempt >= policy.max_retries
                       else f"the retry budget of {policy.budget_s:g} s")
                raise RetriesExhaustedError(
                    f"'{name}': still failing after {attempt + 1} attempt"
                    f"{'s' if attempt else ''} in {spent:.1f} s ({why} used; "
                    f"{type(err).__name__}: {err}).",
                    attempt + 1, round(spent, 3), policy.budget_s) from err
            attempt += 1
            if stats is not None:
                stats.add("retries")
                if is_throttle(err):
                    stats.add("throttled")
            if on_retry is not None:
                on_retry(err)
            time.sleep(delay)
