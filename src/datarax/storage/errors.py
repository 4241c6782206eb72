"""Errors of remote reading and the shard cache.

Example:
    >>> err = RemoteObjectError("'s3://b/a' changed", url="s3://b/a")
    >>> err.url, isinstance(err, RecordError)
    ('s3://b/a', True)
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from datarax.errors import DataraxError, RecordError
from datarax.storage.retry import RetriesExhaustedError, is_access_refused

__all__ = ["CacheFullError", "RemoteObjectError", "RemoteStoreError"]


class _PickledByFields:
    """Errors built as ``cls(message, **fields)``, pickled that way."""

    fields: ClassVar[tuple[str, ...]] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        values = {name: getattr(self, name) for name in self.fields}
        return (functools.partial(type(self), **values), (str(self),))


class RemoteObjectError(_PickledByFields, RecordError):
    """A remote file ``url`` cannot be used: deleted, changed since it was listed, or refused
    for a reason of its own. A ``RecordError``: ``on_error="skip"`` skips its records. A
    source reading the file raises it naming the record too (``index``, in the file)."""

    fields = ("url", "index")

    def __init__(self, message: str, *, url: str, index: int | None = None) -> None:
        super().__init__(message, path=url, index=index)
        self.url = url


class RemoteStoreError(_PickledByFields, DataraxError):
    """The store cannot be read (still failing after every retry, or access refused) while
    reading ``url``. Never skipped by ``on_error="skip"``: it stops the read.

    Example:
        >>> err = RemoteStoreError("cannot read 's3://b/a': still failing", url="s3://b/a")
        >>> err.url, isinstance(err, RecordError)
        ('s3://b/a', False)
    """

    fields = ("url",)

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class CacheFullError(_PickledByFields, DataraxError):
    """The shard cache cannot hold a file: its limit is reached by files in use, or the disk
    is full (``disk_full``). Never skipped by ``on_error="skip"``: it stops the read."""

    fields = ("disk_full",)

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


def refused_error(url: str, err: BaseException) -> RemoteStoreError:
    """The error of a request for ``url`` that the store refused (``err``)."""
    return RemoteStoreError(
        f"cannot read '{url}': access refused ({type(err).__name__}: {err}). Check the "
        "credentials (for S3 the AWS_* variables or profile; they may be missing or expired) "
        "and their permission to read the bucket; the read stops (on_error='skip' does not "
        "skip it).", url=url)


def store_down_error(url: str, err: BaseException) -> RemoteStoreError:
    """The error of a request for ``url`` still failing after its retries (``err``)."""
    budget = getattr(err, "budget_s", None)
    now = f"; now {budget:g}" if budget is not None else ""
    return RemoteStoreError(
        f"cannot read '{url}': {str(err).removeprefix(repr(url) + ': ')} The store is down, "
        "unreachable or throttling for longer than the retries wait; the read stops "
        "(on_error='skip' does not skip it). Check the endpoint and the network (for S3 "
        "AWS_ENDPOINT_URL, for a local server that it runs) and try again; to wait longer "
        f"for a store that comes back, raise DATARAX_RETRY_BUDGET (seconds{now}).", url=url)


def store_error(url: str, err: BaseException) -> RemoteStoreError | None:
    """The error of a request for ``url`` that failed with ``err`` where the store is at
    fault (down or refusing access); None for any other failure."""
    if isinstance(err, RetriesExhaustedError):
        return store_down_error(url, err)
    return refused_error(url, err) if is_access_refused(err) else None
