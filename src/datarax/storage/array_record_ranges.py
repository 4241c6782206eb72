"""``ArrayRecordRanges``: single records of an ArrayRecord file read by byte range, without
downloading the file.

Opening reads the file's tail (postscript and footer,
:mod:`~datarax.storage.array_record_layout`): one request, two when the footer is longer
than ``tail``; a file no larger than that request (two 64 KiB blocks) is read whole by it,
and its records need no further request. A :meth:`~ArrayRecordRanges.read` fetches the
chunks of the records asked for, neighbouring chunks in one request, and decodes them. Files written with transposed
chunks, ``brotli`` or ``snappy`` are refused when opened, naming the writer option.

:meth:`ArrayRecordRanges.for_object` keeps each decoded footer beside a
:class:`~datarax.storage.cache.ShardCache` (``footers/``, keyed like the cached files),
with the file's version, so reopening makes no request and later reads are tied to that
version (:mod:`~datarax.storage.versions`).

Example:
    >>> import os, tempfile
    >>> from array_record.python.array_record_module import ArrayRecordWriter
    >>> path = os.path.join(tempfile.mkdtemp(), "doc.array_record")
    >>> writer = ArrayRecordWriter(path, "group_size:2")
    >>> for i in range(5):
    ...     writer.write(b"record %d" % i)
    >>> writer.close()
    >>> def read_range(offset, length):
    ...     with open(path, "rb") as f:
    ...         f.seek(offset)
    ...         return f.read(length)
    >>> ranges = ArrayRecordRanges(read_range, os.path.getsize(path), name=path)
    >>> len(ranges), ranges.read([4, 0, 1])
    (5, [b'record 4', b'record 0', b'record 1'])
    >>> ranges.stats()["requests"]  # a file of two blocks: opening read it all
    1
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from datarax.errors import ConfigError, RecordError
from datarax.host.counts import check_count, count_words
from datarax.storage.array_record_layout import (
    BLOCK,
    CHUNK_HEADER,
    POSTSCRIPT,
    Footer,
    chunk_header,
    file_span,
    logical_bytes,
    parse_footer,
    parse_postscript,
    refuse_type,
    simple_chunk_records,
)
from datarax.storage.cache import ShardCache, given_cache
from datarax.storage.errors import RemoteObjectError
from datarax.storage.fetch import Fetcher
from datarax.storage.urls import RemoteObject, filesystem

if TYPE_CHECKING:
    from datarax.storage.shards import RemoteShards

__all__ = ["COUNT_MIN_SIZE", "ArrayRecordRanges", "MoreToRead", "load_footer", "ranged_count",
           "save_tail", "tail_path"]

ReadRange = Callable[[int, int], bytes]  # (offset, length) -> exactly ``length`` bytes
TAIL = 64 << 10  # bytes read before the postscript when opening (the footer's likely size)
_SLACK = 16 << 10  # read before a footer outside the tail: the last data chunk's header
_FOOTERS = "footers"
COUNT_MIN_SIZE = 1 << 20  # smaller files are counted in a downloaded copy, larger by footer


class MoreToRead(Exception):  # noqa: N818 - a signal to the caller, not a failure
    """Opening needs more bytes than ``first`` and ``more=False``: open it again with
    ``more=True`` where a request may wait."""


class ArrayRecordRanges:
    """One ArrayRecord file's records, read by byte range.

    Args:
        read_range: ``read_range(offset, length)``: the file's bytes ``[offset,
            offset + length)``.
        size: the file's size in bytes.
        name: the file's name or URL, for messages.
        footer: the file's decoded :class:`~datarax.storage.array_record_layout.Footer`
            (e.g. from :func:`load_footer`); read from the file when None.
        tail: bytes read before the postscript when opening, hoping the footer is in them.
        merge_gap: chunks at most this many bytes apart are read in one request.
        parallel: requests of one :meth:`read` in flight at once.
        first: the answer to the open's first request (:meth:`open_span`), fetched by the
            caller (e.g. with other files' together); counted as a request of this reader.
        more: whether opening from ``first`` may request more bytes; False: it raises
            :class:`MoreToRead` instead (a thread that must not wait on the store).

    Raises:
        RecordError: the file is not an ArrayRecord file, or damaged.
        ConfigError: it was written with an option ranged reads cannot decode.
    """

    def __init__(self, read_range: ReadRange, size: int, *, name: str = "<file>",
                 footer: Footer | None = None, tail: int = TAIL, merge_gap: int = 0,
                 parallel: int = 8, first: bytes | None = None, more: bool = True) -> None:
        parallel = check_count(parallel, "ArrayRecordRanges parallel", 1)  # NumPy ints too
        self.name = name
        self.size = check_count(size, "ArrayRecordRanges size", 0, " (the file's bytes)")
        self.merge_gap = check_count(merge_gap, "ArrayRecordRanges merge_gap", 0, " (bytes)")
        tail = check_count(tail, "ArrayRecordRanges tail", 0, " (bytes)")
        self.parallel = parallel
        self._read_range = read_range
        self._lock = threading.Lock()
        self._requests = 0
        self._bytes = 0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.tail: bytes | None = None  # the file's bytes from its footer on, when read
        self._whole: bytes | None = None  # the whole file, when the open's request read it all
        self._more = more or first is None
        self.footer = footer if footer is not None else self._open(tail, first)
        if self.footer.size != self.size:
            raise RecordError(f"'{name}' holds {self.size} bytes, its footer was read from a "
                              f"file of {self.footer.size}; it changed.", path=name)
        self._firsts = self.footer.firsts

    # ------------------------------------------------------------ building
    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 size: int | None = None, **kwargs: Any) -> ArrayRecordRanges:
        """The file at ``url`` (any fsspec URL or local path) read with the fsspec file
        system's ``cat_file``; ``size`` when known saves a request (counted when made)."""
        fs, path = filesystem(url, storage_options)
        requests = 0
        if size is None:
            size, requests = int(fs.size(path)), 1

        def read_range(offset: int, length: int) -> bytes:
            return fs.cat_file(path, start=offset, end=offset + length)

        out = cls(read_range, size, name=url, **kwargs)
        out._requests += requests
        return out

    @classmethod
    def for_object(cls, obj: RemoteObject, *, fetcher: Fetcher | None = None,
                   cache: ShardCache | None = None, footer: Footer | None = None,
                   keep: Callable[[Callable[[], None]], Any] | None = None,
                   **kwargs: Any) -> ArrayRecordRanges:
        """The listed file ``obj``, read with ``fetcher``'s retries and errors; its footer
        ``footer`` when known, else taken from, or kept beside, ``cache``;
        ``keep(write)`` runs the writing of what is kept (default: at once)."""
        fetcher = fetcher if fetcher is not None else Fetcher()
        if cache is not None:
            cache = given_cache(cache, "ArrayRecordRanges.for_object")

        def read_range(offset: int, length: int) -> bytes:
            return fetcher.read_range(obj, offset, offset + length)

        if footer is None and cache is not None:
            footer = load_footer(cache, obj)
        if footer is not None and cache is not None:  # reads tied to the footer's version
            kept = _load_version(cache, obj)
            if kept is not None:
                fetcher.pin(obj.url, kept)
        out = cls(read_range, obj.size, name=obj.url, footer=footer, **kwargs)
        if cache is not None and footer is None:
            version = fetcher.versions().get(obj.url)
            tail = out.tail

            def write() -> None:
                if version is not None:
                    save_tail(_kept(cache, obj, "version"), version.encode())
                save_tail(_kept(cache, obj, "footer"), out.footer.to_bytes())
                if tail is not None:
                    save_tail(tail_path(cache, obj), tail)

            (keep or _now)(write)
        return out

    def tail_bytes(self) -> bytes:
        """The file's bytes from its footer to its end (read now when not kept)."""
        if self.tail is None:
            self.tail = self._fetch(self.footer.footer_offset,
                                    self.size - self.footer.footer_offset)
        return self.tail

    def __len__(self) -> int:
        return self.footer.num_records

    def __repr__(self) -> str:
        return f"ArrayRecordRanges({self.name!r}, records={len(self)})"

    # ------------------------------------------------------------- reading
    def _fetch(self, offset: int, length: int) -> bytes:
        if self._whole is not None:  # read whole when opened: no request
            return self._whole[offset:offset + length]
        return self._counted(self._read_range(offset, length), offset, length)

    def _counted(self, data: bytes, offset: int, length: int) -> bytes:
        """``data`` (bytes ``[offset, offset + length)``), counted and checked to be whole."""
        with self._lock:
            self._requests += 1
            self._bytes += len(data)
        if len(data) != length:
            raise RecordError(f"'{self.name}': a read of bytes {offset}-{offset + length} "
                              f"returned {len(data)} bytes; the file is shorter than its "
                              "listed size (changed or truncated).", path=self.name)
        return data

    def _fetch_more(self, offset: int, length: int) -> bytes:
        """A request of the open beyond its first answer (:class:`MoreToRead` unless ``more``)."""
        if not self._more:
            raise MoreToRead(f"'{self.name}': opening needs bytes {offset}-{offset + length}, "
                             "outside the first answer.")
        return self._fetch(offset, length)

    @staticmethod
    def open_span(size: int, tail: int = TAIL) -> tuple[int, int]:
        """``(offset, length)`` of the first request opening a file of ``size`` bytes: its
        postscript and the ``tail`` bytes before it (pass the answer as ``first``)."""
        start = max(0, size - POSTSCRIPT - max(0, int(tail)))
        return start, size - start

    def _open(self, tail: int, first: bytes | None = None) -> Footer:
        name = f"'{self.name}'"
        if self.size < 2 * BLOCK or self.size % BLOCK:
            raise RecordError(
                f"{name} is not an ArrayRecord file: it holds {self.size} bytes, and an "
                "ArrayRecord file holds a whole number of 64 KiB blocks, at least two (it may "
                "be truncated, or in another format).", path=self.name)
        post = self.size - POSTSCRIPT
        start, length = self.open_span(self.size, tail)
        data = self._fetch(start, length) if first is None else self._counted(first, start, length)
        footer_offset = parse_postscript(data[post - start:], name)
        if not 0 < footer_offset < post:
            raise RecordError(f"{name}: its postscript points at offset {footer_offset}, "
                              f"outside the file's data (0-{post}); the file is damaged.",
                              path=self.name)
        if footer_offset < start:  # the footer is longer than ``tail``: read the rest of it
            early = max(0, footer_offset - _SLACK)  # and likely the last chunk's header
            data = self._fetch_more(early, start - early) + data
            start = early
        self.tail = bytes(data[footer_offset - start:])
        if start == 0:  # a file no larger than the open's request: its records need none
            self._whole = bytes(data)
        footer = parse_footer(logical_bytes(data[footer_offset - start:post - start], footer_offset),
                              self.size, footer_offset, name)
        if len(footer.offsets):  # the chunk type, from the last data chunk's header
            at = int(footer.offsets[-1])
            span = file_span(at, CHUNK_HEADER)
            head = data[at - start:at - start + span] if at >= start else \
                self._fetch_more(at, span)
            header = chunk_header(logical_bytes(head, at))
            refuse_type(header.chunk_type, name)
            if (header.num_records, header.decoded_data_size) != (int(footer.counts[-1]),
                                                                   int(footer.decoded[-1])):
                raise RecordError(f"{name}: its last chunk's header disagrees with its footer "
                                  "(the file is damaged).", path=self.name)
        return footer

    def chunks_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The chunk of each record index."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            bad = int(idx[(idx < 0) | (idx >= len(self))][0])
            raise IndexError(f"'{self.name}' has {count_words(len(self), 'record')}, asked for "
                             f"record {bad}.")
        return np.searchsorted(self._firsts, idx, side="right") - 1

    def ranges(self, chunks: Sequence[int] | np.ndarray) -> list[tuple[int, int, list[int]]]:
        """``(start, end, chunks)`` of the requests that read ``chunks``: neighbours (and
        chunks at most ``merge_gap`` bytes apart) in one; none when the open read the
        whole file (a file no larger than :meth:`open_span`'s request)."""
        return [] if self._whole is not None else self._runs(chunks)

    def _runs(self, chunks: Sequence[int] | np.ndarray) -> list[tuple[int, int, list[int]]]:
        """:meth:`ranges`, whether or not the file is held whole."""
        out: list[tuple[int, int, list[int]]] = []
        for c in sorted({int(c) for c in chunks}):
            begin, end = int(self.footer.offsets[c]), self.footer.end(c)
            if out and begin - out[-1][1] <= self.merge_gap:
                out[-1] = (out[-1][0], end, out[-1][2] + [c])
            else:
                out.append((begin, end, [c]))
        return out

    def _decode_run(self, data: bytes, start: int, chunks: list[int]) -> dict[int, list[bytes]]:
        out = {}
        for c in chunks:
            begin = int(self.footer.offsets[c])
            piece = data[begin - start:self.footer.end(c) - start]
            where = f"'{self.name}' (chunk {c} at offset {begin})"
            records = simple_chunk_records(logical_bytes(piece, begin), where)
            if len(records) != self.footer.counts[c] or \
                    sum(map(len, records)) != self.footer.decoded[c]:
                raise RecordError(f"{where}: the chunk holds "
                                  f"{count_words(len(records), 'record')}, the footer "
                                  f"says {int(self.footer.counts[c])} (the file is damaged or "
                                  "changed).", path=self.name)
            out[c] = records
        return out

    def _read_run(self, start: int, end: int, chunks: list[int]) -> dict[int, list[bytes]]:
        return self._decode_run(self._fetch(start, end - start), start, chunks)

    def read(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at ``indices`` (in that order; repeats allowed)."""
        runs = self._runs(self.chunks_of(indices))
        decoded: dict[int, list[bytes]] = {}
        if len(runs) <= 1 or self.parallel == 1 or self._whole is not None:
            for run in runs:
                decoded.update(self._read_run(*run))
        else:
            with self._lock:
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        self.parallel, thread_name_prefix="datarax-ranges")
                pool = self._pool
            for part in pool.map(lambda run: self._read_run(*run), runs):
                decoded.update(part)
        return self._pick(indices, decoded)

    def records(self, indices: Sequence[int] | np.ndarray,
                fetched: Sequence[bytes]) -> list[bytes]:
        """The records at ``indices`` from ``fetched``, the caller's answers to
        ``ranges(chunks_of(indices))``; counted and checked as :meth:`read`."""
        runs = self.ranges(self.chunks_of(indices))
        if len(fetched) != len(runs):
            raise ValueError(f"'{self.name}': {len(fetched)} answers for {len(runs)} requests.")
        if self._whole is not None:
            return self.read(indices)  # from the bytes the open read
        decoded: dict[int, list[bytes]] = {}
        for (start, end, chunks), data in zip(runs, fetched, strict=True):
            decoded.update(self._decode_run(self._counted(data, start, end - start), start,
                                            chunks))
        return self._pick(indices, decoded)

    def _pick(self, indices: Sequence[int] | np.ndarray,
              decoded: Mapping[int, list[bytes]]) -> list[bytes]:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        chunks, firsts = self.chunks_of(idx), self._firsts
        return [decoded[int(c)][int(i - firsts[c])] for i, c in zip(idx, chunks, strict=True)]

    def stats(self) -> dict[str, int]:
        """``requests`` made and ``bytes`` read so far (opening included)."""
        with self._lock:
            return {"requests": self._requests, "bytes": self._bytes}

    def close(self) -> None:
        """Stop the request threads (the reader stays usable: they start again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> ArrayRecordRanges:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------- footer cache
def _now(write: Callable[[], None]) -> None:
    write()


def _kept(cache: ShardCache, obj: RemoteObject, what: str) -> str:
    """Where ``obj``'s ``what`` (``footer``, ``tail``, ``version``) is kept beside ``cache``."""
    return os.path.join(cache.directory, _FOOTERS, f"{cache.entry_name(obj)}.{what}")


def load_footer(cache: ShardCache, obj: RemoteObject) -> Footer | None:
    """``obj``'s decoded footer kept beside ``cache`` (by :meth:`ArrayRecordRanges.for_object`),
    or None."""
    try:
        with open(_kept(cache, obj, "footer"), "rb") as f:
            footer = Footer.from_bytes(f.read())
    except (OSError, ValueError, KeyError):
        return None  # absent, or unreadable (then read from the file again and rewritten)
    return footer if footer.size == obj.size else None


def _load_version(cache: ShardCache, obj: RemoteObject) -> str | None:
    try:
        with open(_kept(cache, obj, "version"), "rb") as f:
            return f.read().decode() or None
    except (OSError, UnicodeDecodeError):
        return None


def tail_path(cache: ShardCache, obj: RemoteObject) -> str:
    """Where ``obj``'s bytes from its footer on are kept beside ``cache``."""
    return _kept(cache, obj, "tail")


def save_tail(path: str, data: bytes) -> None:
    """Keep ``data`` at ``path``, written whole, then renamed in."""
    with contextlib.suppress(OSError):  # a folder that cannot be written: read it again later
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{secrets.token_hex(4)}.part"
        try:
            with open(part, "wb") as f:
                f.write(data)
            os.replace(part, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)


def ranged_count(shards: RemoteShards, i: int) -> int | None:
    """Records in file ``i`` from its footer, or None when the file is under
    :data:`COUNT_MIN_SIZE` or ranged reads cannot open it (count a downloaded copy then).

    Raises:
        RemoteObjectError: the file was deleted or changed since it was listed.
        RemoteStoreError: the store still fails after every retry, or refuses access.
    """
    obj = shards.objects[i]
    if obj.size < COUNT_MIN_SIZE or shards.ready(i):
        return None
    try:
        reader = ArrayRecordRanges.for_object(obj, fetcher=shards.fetcher, cache=shards.cache)
    except RemoteObjectError:
        raise
    except (ConfigError, RecordError):
        return None
    return len(reader)
