"""Blocks of ArrayRecord files: runs of whole chunks of about ``block_bytes`` each, cut
from the files' footers, the unit a block-window shuffle orders and a cache downloads.

A file of ``D`` data bytes is cut into ``ceil(D / block_bytes)`` blocks at the chunk
starts nearest to even byte cuts, so each block is a run of whole chunks. Records keep
their global numbers, so per-record keys do not depend on the cut; ``block_bytes=None``
is one block per file (the file-window shuffle). :class:`BlockRecords` reads a block's
records from its downloaded bytes.

Example:
    >>> import numpy as np
    >>> from datarax.storage.array_record_layout import Footer
    >>> footer = Footer(size=4 << 16, footer_offset=100_000, compression=0,
    ...                 offsets=np.arange(0, 100_000, 10_000), counts=np.full(10, 2),
    ...                 decoded=np.full(10, 9_000))
    >>> cut_blocks(footer, 30_000).tolist()  # chunk numbers where blocks start, then the end
    [0, 3, 5, 8, 10]
    >>> FileBlocks.cut([footer, footer], 60_000).counts
    (10, 10, 10, 10)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax.errors import ConfigError, RecordError
from datarax.extras import require
from datarax.storage.array_record_layout import Footer
from datarax.storage.array_record_ranges import (
    ArrayRecordRanges,
    load_footer,
    save_tail,
    tail_path,
)
from datarax.storage.cache import ShardCache
from datarax.storage.fetch import Fetcher
from datarax.storage.urls import FileBlock, RemoteObject

__all__ = ["MIN_BLOCK_BYTES", "BlockRecords", "FileBlocks", "cut_blocks", "footers_of",
           "open_block"]

MIN_BLOCK_BYTES = 64 << 10  # smaller blocks cost a request each for a few records


def cut_blocks(footer: Footer, block_bytes: int | None) -> np.ndarray:
    """The chunk each block of the file starts at, then the number of chunks."""
    chunks = len(footer.offsets)
    data = int(footer.footer_offset) - (int(footer.offsets[0]) if chunks else 0)
    if block_bytes is None or chunks <= 1 or data <= block_bytes:
        return np.asarray([0, chunks], np.int64)
    n = -(-data // int(block_bytes))
    targets = int(footer.offsets[0]) + (np.arange(1, n, dtype=np.int64) * data) // n
    # the chunk start nearest each even cut
    right = np.clip(np.searchsorted(footer.offsets, targets), 1, chunks - 1)
    nearer_left = targets - footer.offsets[right - 1] < footer.offsets[right] - targets
    cuts = np.where(nearer_left, right - 1, right)
    return np.unique(np.concatenate([[0], cuts, [chunks]])).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class FileBlocks:
    """The blocks of a data set's files, in file order.

    Attributes:
        file_of: the file of each block.
        first_chunk, end_chunk: the chunks ``[first, end)`` of each block in its file.
        counts: records in each block.
        footers: each file's :class:`~datarax.storage.array_record_layout.Footer`.
        block_bytes: the size the cut aimed at (None: a block per file).
        tails: for each file, a local file of its bytes from the footer on (the blocks
            are then read by array_record's reader; None: decoded here).
    """

    file_of: tuple[int, ...]
    first_chunk: tuple[int, ...]
    end_chunk: tuple[int, ...]
    counts: tuple[int, ...]
    footers: tuple[Footer, ...]
    block_bytes: int | None
    tails: tuple[str, ...] | None = None

    @classmethod
    def cut(cls, footers: Sequence[Footer], block_bytes: int | None) -> FileBlocks:
        """Each file of ``footers`` cut into blocks of about ``block_bytes``."""
        if block_bytes is not None and (isinstance(block_bytes, bool) or int(block_bytes) < 1):
            raise ConfigError(f"block_bytes must be a positive number of bytes, got "
                              f"{block_bytes!r}.")
        file_of, first, end, counts = [], [], [], []
        for f, footer in enumerate(footers):
            bounds = cut_blocks(footer, block_bytes).tolist()
            firsts = footer.firsts
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                file_of.append(f)
                first.append(a)
                end.append(b)
                counts.append(int(firsts[b] - firsts[a]))
        return cls(tuple(file_of), tuple(first), tuple(end), tuple(counts), tuple(footers),
                   None if block_bytes is None else int(block_bytes))

    def __len__(self) -> int:
        return len(self.counts)

    def with_tails(self, tails: Sequence[str]) -> FileBlocks:
        """These blocks, read with the files' tails kept at ``tails``."""
        return dataclasses.replace(self, tails=tuple(tails))

    @functools.cached_property
    def ends(self) -> np.ndarray:
        """Records in blocks ``0..b``, for each ``b`` (global record numbering)."""
        return np.cumsum(np.asarray(self.counts, np.int64))

    @functools.cached_property
    def file_starts(self) -> np.ndarray:
        """The global number of each file's first record."""
        per_file = np.asarray([f.num_records for f in self.footers], np.int64)
        return np.cumsum(per_file) - per_file

    def byte_range(self, b: int) -> tuple[int, int]:
        """Block ``b``'s bytes ``[start, end)`` in its file."""
        footer = self.footers[self.file_of[b]]
        first, end = self.first_chunk[b], self.end_chunk[b]
        if first == end:
            return 0, 0
        return int(footer.offsets[first]), footer.end(end - 1)

    def sizes(self) -> list[int]:
        """Bytes of each block."""
        return [e - s for s, e in (self.byte_range(b) for b in range(len(self)))]

    def objects(self, files: Sequence[RemoteObject]) -> list[FileBlock]:
        """The blocks as objects to download (``files``: the files the footers are of)."""
        return [FileBlock.of(files[self.file_of[b]], *self.byte_range(b), records=self.counts[b])
                for b in range(len(self))]

    def block_of(self, records: np.ndarray) -> np.ndarray:
        """The block holding each global record number."""
        return np.searchsorted(self.ends, np.asarray(records, np.int64), side="right")


class BlockRecords:
    """Records of one downloaded block, read from its local copy (``path``: the bytes of
    the block's range of its file; ``footer``: the file's footer). Positions are record
    numbers in the file.

    With ``tail`` (the file's bytes from its footer on), the block is read by
    array_record's reader from a sparse copy of the file holding only the block and the
    tail (``detached``: it may outlive the cache entry); else its chunks are decoded here.

    Example:
        >>> import os, tempfile
        >>> from array_record.python.array_record_module import ArrayRecordWriter
        >>> from datarax.storage.array_record_ranges import ArrayRecordRanges, save_tail, tail_path
        >>> path = os.path.join(tempfile.mkdtemp(), "b.array_record")
        >>> w = ArrayRecordWriter(path, "group_size:1")
        >>> for i in range(6): w.write(b"r%d" % i)
        >>> w.close()
        >>> footer = ArrayRecordRanges.from_url(path).footer
        >>> blocks = FileBlocks.cut([footer], 1)  # a block per chunk
        >>> start, end = blocks.byte_range(4)
        >>> copy = path + ".block"
        >>> with open(path, "rb") as src, open(copy, "wb") as dst:
        ...     _ = src.seek(start); _ = dst.write(src.read(end - start))
        >>> reader = BlockRecords(copy, start, footer, name=path)
        >>> reader.read([4])
        [b'r4']
        >>> reader.close()
    """

    def __init__(self, path: str, offset: int, footer: Footer, *, name: str = "<block>",
                 tail: str | None = None) -> None:
        self.offset = int(offset)
        self.detached = tail is not None  # reads its own copy: may outlive the cache entry
        self._fd = os.open(path, os.O_RDONLY)
        self._reader: Any = None
        if tail is not None:
            try:
                self._reader = _sparse_reader(self._fd, self.offset, footer, tail, path)
            except BaseException:
                os.close(self._fd)
                raise
            os.close(self._fd)
            self._fd = -1
        self._ranges = ArrayRecordRanges(self._read, footer.size, name=name, footer=footer,
                                         parallel=1)

    def _read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset - self.offset)

    def read(self, positions: Sequence[int]) -> list[bytes]:
        """The records at ``positions`` (record numbers in the file)."""
        if self._reader is not None:
            return list(self._reader.read(list(positions)))
        return self._ranges.read(positions)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._fd >= 0:
            os.close(self._fd)


def _sparse_reader(fd: int, offset: int, footer: Footer, tail: str, path: str) -> Any:
    """array_record's reader on a sparse copy of the file (block and tail)."""
    folder = os.path.join(os.path.dirname(os.path.dirname(path)), "sparse")
    os.makedirs(folder, exist_ok=True)
    part, name = tempfile.mkstemp(dir=folder, suffix=".array_record")
    try:
        os.ftruncate(part, footer.size)
        _copy(fd, part, os.fstat(fd).st_size, offset)  # the block, at its place in the file
        with open(tail, "rb") as f:
            os.pwrite(part, f.read(), footer.footer_offset)
        os.close(part)
        part = -1
        module = require("array_record.python.array_record_module", extra="arrayrecord",
                         user="reading blocks of ArrayRecord files")
        reader = module.ArrayRecordReader(name, options="readahead_buffer_size:0",
                                          file_reader_buffer_size=4096)
        if not reader.ok():
            raise RecordError(f"'{path}': array_record cannot open the block's copy.",
                              path=path)
        return reader
    finally:
        if part >= 0:
            os.close(part)
        os.unlink(name)


def _copy(src: int, dst: int, size: int, at: int) -> None:
    """``size`` bytes of ``src`` from its start into ``dst`` at ``at`` (in the kernel)."""
    done = 0
    while done < size:
        try:
            moved = os.copy_file_range(src, dst, size - done, done, at + done)
        except (AttributeError, OSError):  # not Linux, or across filesystems it refuses
            chunk = os.pread(src, min(8 << 20, size - done), done)
            moved = os.pwrite(dst, chunk, at + done) if chunk else 0
        if moved <= 0:
            break
        done += moved


def open_block(blocks: FileBlocks, b: int, name: str) -> Any:
    """An opener for :meth:`RemoteShards.open` of block ``b``: a :class:`BlockRecords`."""
    start, _ = blocks.byte_range(b)
    footer = blocks.footers[blocks.file_of[b]]
    tail = blocks.tails[blocks.file_of[b]] if blocks.tails is not None else None
    return functools.partial(BlockRecords, offset=start, footer=footer, name=name, tail=tail)


def footers_of(files: Sequence[str] | Sequence[RemoteObject], *, fetcher: Fetcher | None = None,
               cache: ShardCache | None = None, threads: int = 16) -> list[Footer]:
    """The footer of each file: local paths read from disk; remote objects by range with
    ``fetcher``, kept beside ``cache`` with their tails so a restart makes no request.

    Raises:
        RecordError: a file is not an ArrayRecord file, or damaged.
        ConfigError: a file was written with an option ranged reads cannot decode.
    """
    fetcher = fetcher if fetcher is not None else Fetcher()

    def one(i: int, tail: bytes | None = None) -> Footer:
        item = files[i]
        if isinstance(item, RemoteObject):
            reader = ArrayRecordRanges.for_object(item, fetcher=fetcher, cache=cache, first=tail)
            if cache is not None and not os.path.exists(tail_path(cache, item)):
                save_tail(tail_path(cache, item), reader.tail_bytes())
            return reader.footer
        return ArrayRecordRanges.from_url(os.fspath(item)).footer

    # tails asked for together, each decoded by one thread as it arrives (decoding is CPU:
    # threads decoding at once only contend for the GIL)
    asked = [i for i, item in enumerate(files) if isinstance(item, RemoteObject)
             and (cache is None or load_footer(cache, item) is None)]
    spans = [ArrayRecordRanges.open_span(files[i].size) for i in asked]  # type: ignore[union-attr]
    with (concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(files)))) as pool,
          concurrent.futures.ThreadPoolExecutor(1) as decoder):
        read = fetcher.read_ranges([(files[i], start, start + length) for i, (start, length)
                                    in zip(asked, spans, strict=True)], pool.map,
                                   then=lambda k, tail: one(asked[k], tail),
                                   submit=decoder.submit)
        got = dict(zip(asked, read, strict=True))
        rest = [i for i in range(len(files)) if i not in got]
        got.update(zip(rest, pool.map(one, rest), strict=True))  # kept footers, local files
        return [got[i] for i in range(len(files))]
