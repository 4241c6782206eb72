"""Errors of remote reading and the shard cache.

Example:
    >>> err = RemoteObjectError("'s3://b/a' changed", url="s3://b/a")
    >>> err.url, isinstance(err, RecordError)
    ('s3://b/a', True)
"""

from __future__ import annotations

from typing import Any, ClassVar

from datarax.errors import DataraxError, RecordError

__all__ = ["CacheFullError", "RemoteObjectError", "RemoteStoreError"]


class _PickledByFields:
    """Mixin of errors built as ``cls(message, **fields)``: a pickle (an error sent back
    from a worker process) rebuilds them that way, keeping the keyword ``fields``
    (plain ``Exception`` pickling passes the message alone, which such an ``__init__``
    refuses or which loses the fields)."""

    fields: ClassVar[tuple[str, ...]] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        values = {name: getattr(self, name) for name in self.fields}
        return (_rebuild, (type(self), str(self), values))


def _rebuild(cls: type[Exception], message: str, values: dict[str, Any]) -> Exception:
    return cls(message, **values)


class RemoteObjectError(_PickledByFields, RecordError):
    """A remote file cannot be used: deleted, changed since it was listed (size, version
    tag or SHA-256 differ), or refused by the store for a reason of its own (not a
    transient failure, not a refused access). ``url`` names it.

    A subclass of :class:`~datarax.core.errors.RecordError`: a source's
    ``on_error="skip"`` skips (and counts) the records of such a file.
    """

    fields = ("url",)

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message, path=url)
        self.url = url


class RemoteStoreError(_PickledByFields, DataraxError):
    """The store cannot be read: a request still failing after every retry (the store
    is down, unreachable or throttling for minutes), or access refused (credentials
    missing, expired or without the permission). ``url`` names the file being read.

    Not a problem of a record: a source's ``on_error="skip"`` never skips it (a store
    that stays down would otherwise skip every file left), it stops the read.

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
    """The shard cache cannot hold a file: its size limit is reached by files in use, or
    the local disk is full (``disk_full``). Nothing partial is left in the cache.

    Not a problem of a record: a source's ``on_error="skip"`` never skips it, it stops the
    read. The message names the cache folder, its limit and usage, and what to do.
    """

    fields = ("disk_full",)

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full
