"""Errors of remote reading and the shard cache.

Example:
    >>> err = RemoteObjectError("'s3://b/a' changed", url="s3://b/a")
    >>> err.url, isinstance(err, RecordError)
    ('s3://b/a', True)
"""

from __future__ import annotations

from datarax.errors import DataraxError, RecordError

__all__ = ["CacheFullError", "RemoteObjectError"]


class RemoteObjectError(RecordError):
    """A remote file cannot be used: deleted, changed since it was listed (size, version
    tag or SHA-256 differ), or unreadable after every retry. ``url`` names it.

    A subclass of :class:`~datarax.core.errors.RecordError`: a source's
    ``on_error="skip"`` skips (and counts) the records of such a file.
    """

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message, path=url)
        self.url = url


class CacheFullError(DataraxError):
    """The shard cache cannot hold a file: its size limit is reached by shards in use, or
    the local disk is full. Nothing partial is left in the cache."""
