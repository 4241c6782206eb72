"""Downloading one remote file into a cache entry: chunked, resumed, retried, verified.

The file is read in ranges of ``CHUNK`` bytes, ``parallel`` in flight, each answer written
as it comes. A transient failure is retried from the first byte not written. The bytes
are then checked: SHA-256 when the dataset's metadata gives it, else size and ETag.

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

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from datarax.storage.errors import RemoteObjectError, refused_error
from datarax.storage.fetch_errors import FetchErrors
from datarax.storage.retry import (
    RetryPolicy,
    StorageStats,
    is_access_refused,
    is_throttle,
    is_transient,
    with_retries,
)
from datarax.storage.urls import S3_CONNECTIONS, RemoteObject, filesystem, version_tag
from datarax.storage.versions import (
    VersionMismatch,
    can_read_together,
    read_versioned,
    read_versioned_into,
    read_versioned_together,
)

__all__ = ["CHUNK", "DownloadStopped", "Fetcher", "FollowUp"]

CHUNK = 16 << 20  # a request per 16 MiB: few round trips, bounded memory per request

T = TypeVar("T")


class DownloadStopped(RuntimeError):
    """A download stopped at a range boundary because its reader was closed."""


@dataclasses.dataclass(frozen=True)
class FollowUp:
    """What a ``then`` of :meth:`Fetcher.read_ranges` may return: more ranges to read in
    the same call (``(obj, start, end)`` each), and ``finish(answers)``: the item's result
    from their bytes, in the caller's thread."""

    wanted: Sequence[tuple[RemoteObject, int, int]]
    finish: Callable[[list[bytes]], Any]


class Fetcher(FetchErrors):
    """Downloads remote files into local paths.

    Args:
        storage_options: passed to the fsspec filesystem.
        retry: the :class:`RetryPolicy` of each request.
        stats: counters to add to (a fresh :class:`StorageStats` by default).
        chunk: bytes per range request.
        parallel: range requests of one file in flight at once (1: one after another).
        cancelled: when it returns True, downloads stop before their next request.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None, *,
                 retry: RetryPolicy | None = None, stats: StorageStats | None = None,
                 chunk: int = CHUNK, parallel: int = 1,
                 cancelled: Callable[[], bool] | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        self.stats = stats if stats is not None else StorageStats()
        self.chunk = int(chunk)
        self.parallel = max(1, int(parallel))
        self.cancelled = cancelled
        self._versions: dict[str, str | None] = {}  # url -> version its reads are tied to
        self._versions_lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy ties each file's reads to the same version (``_versions``)."""
        return (functools.partial(Fetcher, self.storage_options, retry=self.retry,
                                  chunk=self.chunk, parallel=self.parallel), (),
                {"_versions": self.versions()})

    def versions(self) -> dict[str, str | None]:
        """The version each file's reads are tied to (by URL), from its listing or first
        request."""
        with self._versions_lock:
            return dict(self._versions)

    def pin(self, url: str, version: str | None) -> str | None:
        """Tie the reads of ``url`` to ``version`` unless already tied; returns the tie."""
        with self._versions_lock:
            return self._versions.setdefault(url, version)

    def download(self, obj: RemoteObject, part: str) -> None:
        """Write ``obj``'s bytes into ``part`` (a file of ``obj.size`` bytes) and verify them.

        Raises:
            RemoteObjectError: the object is gone, changed (size, version tag or SHA-256),
                or refused by the store for a reason of its own.
            RemoteStoreError: the store still fails after the retries, or refuses access.
        """
        fs, path = filesystem(obj.url, self.storage_options, self.retry)
        first, last, _ = obj.span  # a FileBlock: its range of the file
        ranges = [(a, min(last, a + self.chunk)) for a in range(first, last, self.chunk)]
        parallel = min(self.parallel, len(ranges))
        # in order, one range at a time: the digest follows the bytes as they are written
        digest = hashlib.sha256() if obj.sha256 and parallel <= 1 else None
        fd = os.open(part, os.O_RDWR)
        try:
            fetch = functools.partial(self._fetch_range, fs, path, obj, fd, digest)
            if parallel <= 1:
                for start, end in ranges:
                    fetch(start, end)
            else:
                with concurrent.futures.ThreadPoolExecutor(
                        parallel, thread_name_prefix="datarax-range") as pool:
                    for future in [pool.submit(fetch, a, b) for a, b in ranges]:
                        future.result()  # the first failure, once every range has ended
        finally:
            os.close(fd)
        if obj.sha256:
            if digest is None:
                with open(part, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256")
            got = digest.hexdigest()
            if got != obj.sha256:
                self.stats.add("failed")
                raise RemoteObjectError(
                    f"'{obj.url}' changed in the store: its SHA-256 is {got}, the dataset's "
                    f"metadata (datarax_dataset.json) says {obj.sha256} (a shard replaced "
                    "without rewriting the metadata, or the dataset rewritten while being "
                    "read). Write the whole dataset folder again (datarax_dataset.json with "
                    "every shard) and rebuild the source, or read with on_error='skip'.",
                    url=obj.url)
        elif obj.etag is not None and self.versions().get(obj.url, obj.etag) is None:
            # the store answered without a version: ask for it once the bytes are in
            info = self._guarded(fs, path, obj, lambda: fs.info(path))
            now = version_tag(info)
            whole = obj.span[2]
            if int(info.get("size", whole)) != whole or (now is not None and now != obj.etag):
                raise self._changed(obj, f"size {info.get('size')} / version {now!r} now, "
                                         f"{whole} / {obj.etag!r} when listed")
        self.stats.add("fetched")
        self.stats.add("fetched_bytes", obj.size)

    def _fetch_range(self, fs: Any, path: str, obj: RemoteObject, fd: int, digest: Any,
                     start: int, end: int) -> None:
        """Bytes ``[start, end)`` of ``obj``'s file written at their offset in ``fd``."""
        base, _, whole = obj.span
        written = start
        interrupted = False

        def stop_if_cancelled() -> None:
            if self.cancelled is not None and self.cancelled():
                raise DownloadStopped(f"the download of '{obj.url}' stopped: its reader was "
                                      "closed.")

        def on_retry(err: BaseException) -> None:
            nonlocal interrupted
            stop_if_cancelled()
            if written > 0 and not is_throttle(err):
                interrupted = True

        def write(at: int, piece_at: int, piece: bytes, length: int) -> None:
            nonlocal written
            shift = 0 if length == whole > end - at else at  # the answer's first byte's offset
            if shift and length > end - at:
                raise self._changed(obj, f"a read of bytes {at}-{end} returned {length}")
            first, last = max(written, shift + piece_at), min(end, shift + piece_at + len(piece))
            if last <= first:
                return
            view = memoryview(piece)[first - shift - piece_at:last - shift - piece_at]
            if digest is not None:
                digest.update(view)
            offset = first - base
            while view:  # pwrite may write less than asked
                done = os.pwrite(fd, view, offset)
                view, offset = view[done:], offset + done
            written = last

        while written < end:
            stop_if_cancelled()
            at = written
            self._request_into(fs, path, obj, lambda: written, end, write, on_retry)
            if interrupted:
                self.stats.add("resumed")
                interrupted = False
            if written == at:
                raise self._changed(obj, f"a read of bytes {at}-{end} returned 0")

    def read_range(self, obj: RemoteObject, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``obj`` in one request, retried (not verified).

        Raises:
            RemoteObjectError: the object is gone, or shorter than when listed.
            RemoteStoreError: the store still fails after the retries, or refuses access.
        """
        fs, path = filesystem(obj.url, self.storage_options)
        return self._exact(obj, self._request(fs, path, obj, start, end), start, end)

    def read_ranges(self, wanted: Sequence[tuple[RemoteObject, int, int]],
                    map_: Callable[..., Iterable[Any]] = map,
                    then: Callable[[int, bytes], Any] | None = None,
                    submit: Callable[..., concurrent.futures.Future[Any]] | None = None,
                    ) -> list[Any]:
        """:meth:`read_range` of each ``(obj, start, end)``, in that order (with ``then``:
        ``then(i, bytes)`` of each; a :class:`FollowUp` it returns is finished with its
        ranges' bytes, read in the same call). On S3 the requests are sent together
        (:func:`~datarax.storage.versions.read_versioned_together`), each ``then`` run in
        ``submit`` as its answer comes, and the ranges that failed transiently are sent
        again together under one retry budget. Elsewhere ``map_`` runs each read.

        Raises:
            RemoteObjectError: an object is gone, changed, or shorter than when listed.
            RemoteStoreError: the store still fails after the retries, or refuses access.
        """
        if not wanted:
            return []
        items = list(wanted)
        top = len(items)
        lock = threading.Lock()
        known: dict[str, tuple[Any, str]] = {}  # a file's (fs, path), asked once a call

        def place(obj: RemoteObject) -> tuple[Any, str]:
            with lock:
                if obj.url not in known:
                    known[obj.url] = filesystem(obj.url, self.storage_options)
                return known[obj.url]

        places = [place(obj) for obj, _, _ in items]
        fs = places[0][0]
        if not can_read_together(fs) or any(f is not fs for f, _ in places):
            return self._followed(list(map_(lambda i: self._then(then, i, self.read_range(
                *items[i])), list(range(top)))), lambda more: list(map_(
                    lambda w: self.read_range(*w), more)))
        tied = [self._expected(obj) for obj, _, _ in items]
        got: dict[int, Any] = {}  # a range's bytes, or its error
        handed: dict[int, concurrent.futures.Future[Any]] = {}  # an item's ``then`` running
        results: dict[int, Any] = {}  # what an item's ``then`` returned
        follow: dict[int, list[int]] = {}  # an item's follow-up ranges (their keys)

        def request(k: int) -> tuple[str, int, int, str | None]:
            return places[k][1], items[k][1], items[k][2], tied[k][0]

        def hand_on(i: int, data: bytes) -> list[tuple[int, Any]]:  # in submit's thread
            results[i] = result = self._then(then, i, data)
            if not isinstance(result, FollowUp):
                return []
            where = [place(obj) for obj, _, _ in result.wanted]
            versions = [self._expected(obj) for obj, _, _ in result.wanted]
            with lock:  # ``submit`` may run several at once: the keys and lists in step
                keys = list(range(len(items), len(items) + len(result.wanted)))
                items.extend(result.wanted)
                places.extend(where)
                tied.extend(versions)
            follow[i] = keys
            return [(k, request(k)) for k in keys]

        def arrived(k: int, answer: Any) -> concurrent.futures.Future[Any] | None:
            if not isinstance(answer, BaseException):  # on the event loop: checks, hands on
                obj, start, end = items[k]
                try:
                    self._tie(obj, tied[k][0], tied[k][1], answer[1], start, end)
                    answer = self._exact(obj, answer[0], start, end)
                except RemoteObjectError as err:
                    answer = err
            got[k] = answer
            if isinstance(answer, BaseException) or k >= top or then is None or submit is None:
                return None
            handed[k] = submit(hand_on, k, answer)
            return handed[k]

        def attempt() -> None:  # the failed ranges together; raises if one failed transiently
            asked = [k for k in range(len(items)) if k not in got or retry_of(got[k])]
            answers = read_versioned_together(fs, [(k, request(k)) for k in asked],
                                              self.connections(fs), arrived)
            for k, answer in answers.items():
                got.setdefault(k, answer)  # ``arrived`` itself failed
            failed = [k for k in range(len(items)) if retry_of(got.get(k))]
            if failed:
                culprit[:] = [failed[0]]
                raise got[failed[0]]

        def retry_of(answer: Any) -> bool:
            return isinstance(answer, BaseException) and not isinstance(
                answer, VersionMismatch) and is_transient(answer)

        def bytes_of(k: int) -> bytes:
            answer, (obj, start, end) = got[k], items[k]
            if isinstance(answer, VersionMismatch):
                raise self._version_changed(obj, tied[k][0], answer.now or self._version_now(
                    fs, places[k][1]), start, end) from answer
            if isinstance(answer, RemoteObjectError):
                raise answer
            if isinstance(answer, BaseException):  # failed for good: asked alone, for its error
                return self.read_range(obj, start, end)
            return answer

        culprit = [0]  # the range that failed last (its URL names the error)
        self._guarded(fs, places[0][1], items[0][0], attempt,
                      culprit=lambda: (items[culprit[0]][0], places[culprit[0]][1]))
        out: list[Any] = []
        for i in range(top):
            data = bytes_of(i)
            if i in handed:
                handed[i].result()  # ``then``'s own failure
                result = results[i]
            else:
                result = self._then(then, i, data)
            if isinstance(result, FollowUp):
                result = result.finish([bytes_of(k) for k in follow[i]] if i in follow else
                                       self.read_ranges(result.wanted))
            out.append(result)
        return out

    @staticmethod
    def _then(then: Callable[[int, bytes], Any] | None, i: int, data: bytes) -> Any:
        return data if then is None else then(i, data)

    @staticmethod
    def _followed(results: list[Any], read: Callable[[list[Any]], list[bytes]]) -> list[Any]:
        """``results`` with each :class:`FollowUp` finished (all ranges read with ``read``)."""
        ups = [(i, r) for i, r in enumerate(results) if isinstance(r, FollowUp)]
        data = read([w for _, up in ups for w in up.wanted])
        at = 0
        for i, up in ups:
            results[i] = up.finish(data[at:at + len(up.wanted)])
            at += len(up.wanted)
        return results

    def _expected(self, obj: RemoteObject) -> tuple[str | None, bool]:
        """The version ``obj``'s next read names, and whether its answer is checked."""
        with self._versions_lock:
            known = obj.url in self._versions
            expected = self._versions.get(obj.url, obj.etag)
        return expected, not known or expected is not None

    @staticmethod
    def connections(fs: Any) -> int:
        """Requests of :meth:`read_ranges` in flight at once on ``fs``: its connections."""
        config = getattr(fs, "config_kwargs", None) or {}
        return int(config.get("max_pool_connections") or S3_CONNECTIONS)

    def _exact(self, obj: RemoteObject, data: bytes, start: int, end: int) -> bytes:
        """``data`` as bytes ``[start, end)`` of ``obj`` (a whole answer cut to them)."""
        if len(data) == obj.span[2] > end - start:  # a server ignoring ranges sent it whole
            data = data[start:end]
        if len(data) != end - start:
            raise self._changed(obj, f"a read of bytes {start}-{end} returned {len(data)}")
        return data

    def _request_into(self, fs: Any, path: str, obj: RemoteObject, resume: Callable[[], int],
                      end: int, into: Callable[[int, int, bytes, int], None],
                      on_retry: Callable[[BaseException], None] | None = None) -> None:
        """:meth:`_request` handed to ``into`` piece by piece, resumed at ``resume()``."""
        def attempt(expected: str | None, check: bool) -> tuple[None, str | None]:
            at = resume()
            return None, read_versioned_into(fs, path, at, end, expected,
                                             lambda k, piece, length: into(at, k, piece, length),
                                             check=check)

        self._tied(fs, path, obj, resume(), end, attempt, on_retry)

    def _request(self, fs: Any, path: str, obj: RemoteObject, start: int, end: int) -> bytes:
        return self._tied(fs, path, obj, start, end, lambda expected, check: read_versioned(
            fs, path, start, end, expected, check=check), None)

    def _tied(self, fs: Any, path: str, obj: RemoteObject, start: int, end: int,
              read: Callable[[str | None, bool], tuple[T, str | None]],
              on_retry: Callable[[BaseException], None] | None) -> T:
        """``read(expected, check)`` retried, refused unless of the tied version."""
        expected, check = self._expected(obj)
        try:
            out, now = self._guarded(fs, path, obj, lambda: read(expected, check), on_retry)
        except VersionMismatch as err:
            raise self._version_changed(obj, expected, err.now or self._version_now(fs, path),
                                        start, end) from err
        self._tie(obj, expected, check, now, start, end)
        return out

    def _tie(self, obj: RemoteObject, expected: str | None, check: bool, now: str | None,
             start: int, end: int) -> None:
        """Tie ``obj``'s reads to the version that answered, or refuse another."""
        if check:
            tied = self.pin(obj.url, now if expected is None else expected)
            if now is not None and tied is not None and now != tied:
                raise self._version_changed(obj, tied, now, start, end)

    def _guarded(self, fs: Any, path: str, obj: RemoteObject, call: Callable[[], T],
                 on_retry: Callable[[BaseException], None] | None = None,
                 culprit: Callable[[], tuple[RemoteObject, str]] | None = None) -> T:
        """``call()`` with its retries, its failures as datarax errors."""
        named = culprit or (lambda: (obj, path))
        try:
            return with_retries(call, lambda: named()[0].url, self.retry, self.stats,
                                on_retry=on_retry)
        except FileNotFoundError as err:
            raise self._missing(named()[0], err) from err
        except OSError as err:
            raise self._unreadable(fs, named()[1], named()[0], err) from err
        except Exception as err:  # noqa: BLE001 - e.g. credentials missing, not an OSError
            if is_access_refused(err):
                raise refused_error(named()[0].url, err) from err
            raise
