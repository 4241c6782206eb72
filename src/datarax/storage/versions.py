"""Ranged reads tied to one version of a remote object.

Every ranged request names the version it expects (the listing's version tag, else the
one the file's first request was answered with); :func:`read_versioned` returns the bytes
with the version that answered, so a caller can refuse another version's bytes. On S3 the
``GetObject`` carries ``If-Match`` (a changed object answers 412: :class:`VersionMismatch`;
no request added); elsewhere the version is asked (``fs.info``) after the range is read.

Example:
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe("/versions-doc/a.bin", b"hello")
    >>> data, version = read_versioned(fs, "/versions-doc/a.bin", 1, 4, None)
    >>> data, version is not None
    (b'ell', True)
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from datarax.errors import DataraxError, error_chain
from datarax.storage.urls import version_tag

__all__ = ["PIECE", "VersionMismatch", "can_read_together", "read_versioned",
           "read_versioned_into", "read_versioned_together"]

# bytes of an S3 answer handed on at a time by :func:`read_versioned_into`: written while
# the event loop reads the next ones, no buffer of the whole range (less client CPU)
PIECE = 1 << 20

Wanted = tuple[str, int, int, "str | None"]  # (path, start, end, expected version)


class VersionMismatch(DataraxError):
    """The store refused a ranged read because the object is no longer the version the
    request named (S3 ``If-Match`` failed); ``now`` is its version when the answer says."""

    def __init__(self, message: str, *, now: str | None = None) -> None:
        super().__init__(message)
        self.now = now


def read_versioned(fs: Any, path: str, start: int, end: int, expected: str | None,
                   *, check: bool = True) -> tuple[bytes, str | None]:
    """Bytes ``[start, end)`` of ``path`` on ``fs`` and the version that answered them
    (None when the store reports none, or ``check`` is False: then one plain request).

    Raises:
        VersionMismatch: the store refused the read: the object is no longer ``expected``.
    """
    if _is_s3(fs):  # one GetObject with If-Match, its pieces joined
        pieces: list[bytes] = []
        version = read_versioned_into(fs, path, start, end, expected,
                                      lambda _at, piece, _length: pieces.append(piece))
        return b"".join(pieces), version
    data = fs.cat_file(path, start=start, end=end)
    if not check:
        return data, None
    return data, version_tag(fs.info(path))


def read_versioned_into(fs: Any, path: str, start: int, end: int, expected: str | None,
                        into: Callable[[int, bytes, int], None], *,
                        check: bool = True) -> str | None:
    """:func:`read_versioned`, the answer's bytes handed to ``into(offset, piece, length)``
    as they come (``offset``: of ``piece`` in the answer; ``length``: the answer's), in the
    calling thread; returns the version that answered. On S3 pieces are at most
    :data:`PIECE` bytes; elsewhere the answer is one piece.

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> fs.pipe("/versions-doc/b.bin", b"hello")
        >>> got = []
        >>> _ = read_versioned_into(fs, "/versions-doc/b.bin", 1, 4, None,
        ...                         lambda at, piece, length: got.append((at, piece, length)))
        >>> got
        [(0, b'ell', 3)]

    Raises:
        VersionMismatch: the store refused the read: the object is no longer ``expected``.
    """
    if not _is_s3(fs):
        data, version = read_versioned(fs, path, start, end, expected, check=check)
        into(0, data, len(data))
        return version
    request = _s3_request(fs, path, start, end, expected)
    if end <= start:
        return expected
    try:
        response = fs.call_s3("get_object", **request)
    except OSError as err:
        _raise_if_mismatch(err, path, expected)
        raise
    pieces: queue.SimpleQueue[tuple[int, bytes, int] | None] = queue.SimpleQueue()
    reading = asyncio.run_coroutine_threadsafe(_pieces(response, pieces.put), fs.loop)
    try:
        while (item := pieces.get()) is not None:
            into(*item)
    except BaseException:
        reading.cancel()  # the body is closed on the loop
        raise
    reading.result()  # the read's own failure (e.g. the connection cut midway)
    return version_tag(response)


async def _pieces(response: dict[str, Any], put: Callable[[Any], None]) -> None:
    """The body of a ``GetObject`` response, ``put`` piece by piece as ``(offset, piece,
    length)``, then None (also after a failure: the caller finds it in the task)."""
    body = response["Body"]
    length = int(response.get("ContentLength") or 0)
    at = 0
    try:
        while piece := await body.read(PIECE):
            put((at, piece, max(length, at + len(piece))))
            at += len(piece)
    finally:
        body.close()
        put(None)


def _is_s3(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "s3" in protocols and callable(getattr(fs, "call_s3", None))


def can_read_together(fs: Any) -> bool:
    """Whether :func:`read_versioned_together` can send ``fs``'s requests together (S3).

    Example:
        >>> import fsspec
        >>> can_read_together(fsspec.filesystem("memory"))  # read one range at a time
        False
    """
    return _is_s3(fs) and callable(getattr(fs, "get_s3", None))


def read_versioned_together(fs: Any, wanted: Sequence[tuple[Hashable, Wanted]],
                            at_once: int = 64,
                            arrived: Callable[[Any, Any], Future[Any] | None] | None = None,
                            ) -> dict[Any, tuple[bytes, str | None] | Exception]:
    """What :func:`read_versioned` answers for each ``(key, (path, start, end, expected))``
    of ``wanted``, by key, sent together in one hand-off to s3fs's event loop (``at_once``
    in flight; S3 only). A failed request answers its exception, not retried.
    ``arrived(key, answer)`` runs on the event loop as each answer comes; it may return a
    ``Future`` of more ``(key, Wanted)`` pairs, sent in the same hand-off."""
    import asyncio

    import fsspec.asyn

    async def one(gate: asyncio.Semaphore, path: str, start: int, end: int,
                  expected: str | None) -> tuple[bytes, str | None]:
        request = _s3_request(fs, path, start, end, expected)
        if end <= start:
            return b"", expected
        async with gate:
            client = await fs.get_s3(request["Bucket"])
            try:
                response = await client.get_object(**request, **(getattr(fs, "req_kw", None) or {}))
            except Exception as err:
                _raise_if_mismatch(err, path, expected)
                raise
            data = await _body(response)
        return data, version_tag(response)

    async def every() -> dict[Any, Any]:
        await fs.set_session()
        gate = asyncio.Semaphore(max(1, at_once))
        answers: dict[Any, Any] = {}
        running: set[asyncio.Future[Any]] = set()

        async def told(key: Any, item: Wanted) -> None:
            try:
                answer: Any = await one(gate, *item)
            except Exception as err:  # noqa: BLE001 - answered, as gather's return_exceptions
                answer = err
            answers[key] = answer
            try:
                more = arrived(key, answer) if arrived is not None else None
            except Exception as err:  # noqa: BLE001 - the caller's own failure, answered
                answers[key], more = err, None
            if more is not None:
                try:
                    pairs = await asyncio.wrap_future(more)
                except Exception:  # noqa: BLE001 - the caller finds it in its own future
                    pairs = ()
                start(pairs or ())

        def start(pairs: Iterable[tuple[Any, Wanted]]) -> None:
            for key, item in pairs:
                task = asyncio.ensure_future(told(key, item))
                running.add(task)
                task.add_done_callback(running.discard)

        start(wanted)
        while running:
            await asyncio.wait(set(running))
        return answers

    return fsspec.asyn.sync(fs.loop, every)


def _s3_request(fs: Any, path: str, start: int, end: int, expected: str | None) -> dict[str, Any]:
    """The ``GetObject`` arguments of a ranged read tied to version ``expected``."""
    bucket, key, version_id = fs.split_path(path)
    request: dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": f"bytes={start}-{end - 1}"}
    if version_id:
        request["VersionId"] = version_id
    if expected is not None and not getattr(fs, "local_expiry_check", False):
        request["IfMatch"] = f'"{expected}"'
    return request


async def _body(response: dict[str, Any]) -> bytes:
    """The bytes of a ``GetObject`` response's body (closed after)."""
    body = response["Body"]
    try:
        return await body.read()
    finally:
        body.close()


def _raise_if_mismatch(err: BaseException, path: str, expected: str | None) -> None:
    """Raise :class:`VersionMismatch` (from ``err``) where ``err`` is a 412."""
    if _precondition_failed(err):
        raise VersionMismatch(f"'{path}' is no longer version {expected!r} (412 "
                              "PreconditionFailed)") from err


def _precondition_failed(err: BaseException) -> bool:
    """Whether ``err`` (s3fs's OSError, caused by botocore's ClientError) is a 412."""
    for current in error_chain(err):
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "412") or status == 412:
                return True
    return False
