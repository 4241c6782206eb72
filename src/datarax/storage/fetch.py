"""Downloading one remote file into a cache entry: chunked, resumed, retried, verified.

The file is read in ranges of ``CHUNK`` bytes. A transient failure (throttling, a timeout,
a connection dropped mid-object) is retried with backoff from the first byte not yet
written — a range request, never a restart from zero. At the end the bytes are checked
against what the listing or the dataset's metadata said: SHA-256 when known, else the
size and, after the download, the version tag (ETag) again.

Example:
    >>> import fsspec, os, tempfile
    >>> from datarax.storage.urls import RemoteObject
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe("/fetch-doc/a.bin", b"hello")
    >>> part = os.path.join(tempfile.mkdtemp(), "a.part")
    >>> with open(part, "wb") as f:
    ...     _ = f.truncate(5)
    >>> obj = RemoteObject("memory://fetch-doc/a.bin", 5)
    >>> Fetcher().download(obj, part)
    >>> open(part, "rb").read()
    b'hello'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from datarax.storage.errors import RemoteObjectError
from datarax.storage.retry import RetryPolicy, StorageStats, is_throttle, with_retries
from datarax.storage.urls import RemoteObject, filesystem, version_tag

__all__ = ["CHUNK", "Fetcher"]

CHUNK = 8 << 20


class Fetcher:
    """Downloads remote files into local paths (see the module docstring).

    Args:
        storage_options: passed to the fsspec filesystem.
        retry: the :class:`RetryPolicy` of each request.
        stats: counters to add to (a fresh :class:`StorageStats` by default).
        chunk: bytes per range request.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None, *,
                 retry: RetryPolicy | None = None, stats: StorageStats | None = None,
                 chunk: int = CHUNK) -> None:
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        self.stats = stats if stats is not None else StorageStats()
        self.chunk = int(chunk)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fetcher, (self.storage_options, self.retry, None, self.chunk))

    def _missing(self, url: str, err: BaseException) -> RemoteObjectError:
        self.stats.add("failed")
        return RemoteObjectError(
            f"'{url}' was deleted from the store after the dataset was listed "
            f"({type(err).__name__}: {err}); restore it, or read with on_error='skip'.", url=url)

    def download(self, obj: RemoteObject, part: str) -> None:
        """Write ``obj``'s bytes into ``part`` (a file of ``obj.size`` bytes) and verify them.

        Raises:
            RemoteObjectError: the object is gone, changed (size, version tag or SHA-256),
                or still failing after the retries.
        """
        fs, path = filesystem(obj.url, self.storage_options)
        digest = hashlib.sha256() if obj.sha256 else None
        written = 0
        interrupted = False

        def on_retry(err: BaseException) -> None:
            nonlocal interrupted
            if written and not is_throttle(err):
                interrupted = True

        with open(part, "r+b") as out:
            while written < obj.size:
                end = min(obj.size, written + self.chunk)
                start = written
                try:
                    data = with_retries(lambda: fs.cat_file(path, start=start, end=end),
                                        obj.url, self.retry, self.stats, on_retry=on_retry)
                except FileNotFoundError as err:
                    raise self._missing(obj.url, err) from err
                except OSError as err:
                    self.stats.add("failed")
                    raise RemoteObjectError(f"cannot read '{obj.url}': {err}", url=obj.url) from err
                if interrupted:
                    self.stats.add("resumed")
                    interrupted = False
                if len(data) > end - start or (not data and end > start):
                    raise self._changed(obj, f"a read of bytes {start}-{end} returned {len(data)}")
                out.write(data)
                if digest is not None:
                    digest.update(data)
                written += len(data)
        if digest is not None:
            got = digest.hexdigest()
            if got != obj.sha256:
                raise self._changed(obj, f"its SHA-256 is {got}, the dataset's metadata says "
                                         f"{obj.sha256}")
        elif obj.etag is not None:
            try:
                info = with_retries(lambda: fs.info(path), obj.url, self.retry, self.stats)
            except FileNotFoundError as err:
                raise self._missing(obj.url, err) from err
            now = version_tag(info)
            if int(info.get("size", obj.size)) != obj.size or (now is not None and now != obj.etag):
                raise self._changed(obj, f"size {info.get('size')} / version {now!r} now, "
                                         f"{obj.size} / {obj.etag!r} when listed")
        self.stats.add("fetched")
        self.stats.add("fetched_bytes", obj.size)

    def _changed(self, obj: RemoteObject, detail: str) -> RemoteObjectError:
        self.stats.add("failed")
        return RemoteObjectError(
            f"'{obj.url}' changed in the store since the dataset was listed ({detail}); the "
            "dataset was rewritten while being read. Rebuild the source (it lists the files "
            "again), or read with on_error='skip'.", url=obj.url)
