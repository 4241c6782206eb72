"""``ArrayRecordFiles``: the records of a set of ArrayRecord files, read in batches.

One random-access ``ArrayRecordReader`` per file, opened on first use, at most a
bounded number open at once (:mod:`~datarax.sources.open_readers`); records are
numbered across the files in their order. :mod:`datarax.sources.array_record` reads
through it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax.extras import require  # not core.extras: decode workers load no JAX
from datarax.sources.open_readers import (
    FileVersions,
    OpenReaders,
    TooManyOpenFiles,
    default_limit,
)
from datarax.storage import RemoteShards
from datarax.storage.blocks import FileBlocks, open_block
from datarax.storage.head_start import HeadStart

__all__ = ["READ_BUFFER_BYTES", "ArrayRecordFiles", "array_record_reader"]


def array_record_reader() -> Any:
    """array_record's ``ArrayRecordReader`` class, imported on first use (the optional
    ``arrayrecord`` extra, Linux wheels only; refused by name when missing)."""
    module = require(
        "array_record.python.array_record_module", extra="arrayrecord",
        user="ArrayRecordSourceModule",
    )
    return module.ArrayRecordReader



class ArrayRecordFiles:
    """Records of ArrayRecord files, numbered across the files, read in batches.

    One array_record ``ArrayRecordReader`` per file (the options Grain's data source
    uses), opened on first use and shared by the reader threads (its reads release
    Python's lock); at most ``max_open`` are open at once (default: a quarter of the
    process's open-file limit), the least recently used closed to open another, so
    thousands of shards read in a shuffled order do not run out of file descriptors.
    A file opened again is refused (a ``FileChangedError``) when its size, modification
    time or record count is not the one first opened, counted (``counts``).
    A batch's keys are grouped by file: one ``read(positions)`` per file touched, on
    the calling thread. A file that cannot be opened raises at the
    read (the source names it and the record); a later read tries again. It pickles
    as its file list (a worker process opens its own readers). Remote files not in the
    cache yet are read by byte range while they download (``head``: a
    :class:`~datarax.storage.head_start.HeadStart`), the same records either way.

    Example:
        >>> import os, tempfile
        >>> from array_record.python.array_record_module import ArrayRecordWriter
        >>> path = os.path.join(tempfile.mkdtemp(), "a.array_record")
        >>> w = ArrayRecordWriter(path, "group_size:1")
        >>> for i in range(3): w.write(bytes([i]))
        >>> w.close()
        >>> files = ArrayRecordFiles([path, path], [3, 3])
        >>> len(files), files.__getitems__([4, 0, 5])
        (6, [b'\\x01', b'\\x00', b'\\x02'])
        >>> files.close()
    """

    def __init__(self, files: Sequence[str], counts: Sequence[int],
                 remote: RemoteShards | None = None, head: HeadStart | None = None,
                 blocks: FileBlocks | None = None, max_open: int | None = None) -> None:
        self.files = tuple(files)
        self.counts = tuple(int(c) for c in counts)
        self.__setstate__({"files": self.files, "counts": self.counts, "remote": remote,
                           "head": head, "blocks": blocks, "max_open": max_open})

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self.files, "counts": self.counts, "remote": self.remote,
                "head": self.head, "blocks": self.blocks, "max_open": self.max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.files, self.counts = state["files"], state["counts"]
        self.remote = state.get("remote")  # remote files: read through the local shard cache
        self.head = state.get("head")  # ... or by range until they are in it
        self.blocks = state.get("blocks")  # remote's objects are these blocks of the files
        self._ends = np.cumsum(np.asarray(self.counts, dtype=np.int64))
        self._starts = self._ends - np.asarray(self.counts, dtype=np.int64)
        self.ends = tuple(self._ends.tolist())  # record numbers where each file ends
        self.max_open = state.get("max_open")  # None: the process's limit (read there)
        self._versions = FileVersions()  # each file as this process first opened it
        self._readers = OpenReaders(functools.partial(_open_nth, self.files, self.counts,
                                                      self._versions), _close_reader,
                                    self.max_open if self.max_open is not None
                                    else default_limit())

    def __len__(self) -> int:
        return int(self._ends[-1])

    @property
    def open_files(self) -> int:
        """Local files open now (at most ``max_open`` not being read)."""
        return self._readers.open_count

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, keys: Sequence[int]) -> list[bytes]:
        keys_np = np.asarray(keys, dtype=np.int64)
        if self.blocks is not None:
            return self._read_blocks(keys_np)
        file_of = np.searchsorted(self._ends, keys_np, side="right")
        within = keys_np - self._starts[file_of]
        if self.head is None and len(keys_np) and file_of[0] == file_of[-1] \
                and (file_of == file_of[0]).all():
            return list(self._read(int(file_of[0]), within.tolist()))  # one file: in order
        # each file's records (in key order) scattered into their slots at C speed; the
        # work grows with the keys, not with the files (thousands of shards)
        by_file = np.argsort(file_of, kind="stable")
        touched, first = np.unique(file_of[by_file], return_index=True)
        bounds = [*first.tolist(), len(by_file)]
        groups = {f: by_file[bounds[i]:bounds[i + 1]] for i, f in enumerate(touched.tolist())}
        ranged = {} if self.head is None else self.head.read(
            {f: within[slots].tolist() for f, slots in groups.items()})
        out = np.empty(len(keys_np), dtype=object)
        for f, slots in groups.items():
            records = ranged.get(f)
            out[slots] = records if records is not None else self._read(f, within[slots].tolist())
        return out.tolist()

    def _read_blocks(self, keys: np.ndarray) -> list[bytes]:
        """Records at ``keys`` from the downloaded blocks holding them (one read per block)."""
        blocks, remote = self.blocks, self.remote
        assert blocks is not None and remote is not None
        block_of = blocks.block_of(keys)
        by_block = np.argsort(block_of, kind="stable")
        ordered = block_of[by_block]
        uniq, first = np.unique(block_of, return_index=True)
        # blocks in the order the keys reach them (the epoch's), as read-ahead expects
        slots = {b: by_block[np.searchsorted(ordered, b):np.searchsorted(ordered, b, "right")]
                 for b in uniq[np.argsort(first, kind="stable")].tolist()}
        starts = blocks.file_starts
        ranged = {} if self.head is None else self.head.read(  # blocks not cached: by range
            {b: (keys[s] - starts[blocks.file_of[b]]).tolist() for b, s in slots.items()})
        out = np.empty(len(keys), dtype=object)
        for b, s in slots.items():
            if b in ranged:
                out[s] = ranged[b]
            else:
                self._read_block(b, keys, s, out)
        return out.tolist()

    def _read_block(self, b: int, keys: np.ndarray, slots: np.ndarray, out: np.ndarray) -> None:
        """The records of ``keys[slots]`` (in block ``b``) into their slots of ``out``."""
        blocks, remote = self.blocks, self.remote
        assert blocks is not None and remote is not None
        f = blocks.file_of[b]
        positions = (keys[slots] - blocks.file_starts[f]).tolist()
        opener = open_block(blocks, b, self.files[f])

        def read() -> list[bytes]:
            with remote.open(b, opener, _close_reader) as reader:
                return reader.read(positions)

        out[slots] = remote.reading(b, read)  # a copy damaged on disk: fetched again

    def _read(self, f: int, positions: list[int]) -> list[bytes]:
        """Records at ``positions`` of file ``f`` (one batched read)."""
        if self.remote is not None:  # the cached copy, fetched (or read ahead) first
            remote = self.remote

            def read() -> list[bytes]:
                with remote.open(f, _open_reader) as reader:
                    return reader.read(positions)

            return remote.reading(f, read)  # a copy damaged on the local disk: fetched again
        return self._readers.read(f, lambda reader: reader.read(positions))

    def stop(self) -> None:
        """Stop the downloads (read-ahead's and the readers' own) at their next request or
        retry, so that closing does not wait out a failing store's retries."""
        if self.remote is not None:
            self.remote.stop()

    def close(self) -> None:
        """Close the open readers. Never raises: a reader whose file was deleted or
        truncated reports that again when closed, but each read of it already raised
        an error naming the file, and nothing is written."""
        if self.head is not None:
            self.head.close()
        if self.remote is not None:
            self.remote.close()
        self._readers.close()



def _close_reader(reader: Any) -> None:
    reader.close()


#: bytes each read of a file pulls in at least: one page keeps random reads of small
#: records cheap, and sequential reads no slower (docs/benchmarks.md)
READ_BUFFER_BYTES = 4096


def _open_nth(files: Sequence[str], counts: Sequence[int], versions: FileVersions,
              f: int) -> Any:
    """File ``f``'s reader, refused when the file is not the one first opened or holds
    another number of records than counted."""
    return versions.open(files[f], _open_reader, _num_records, counts[f], _close_reader)


def _num_records(reader: Any) -> int:
    return int(reader.num_records())


def _open_reader(path: str) -> Any:
    """An ``ArrayRecordReader`` for random access to ``path`` (no read-ahead buffer)."""
    reader = array_record_reader()(
        path, options="readahead_buffer_size:0", file_reader_buffer_size=READ_BUFFER_BYTES)
    if reader.ok():
        return reader
    try:
        reader.close()
        cause = "the reader could not open it"
    except Exception as err:  # noqa: BLE001 - the reader's reason, raised below
        cause = str(err) or "the reader could not open it"
    if "Too many open files" in cause:  # the process's limit, not the file: raised, not skipped
        raise TooManyOpenFiles(path, cause)
    raise OSError(f"cannot open the file: {cause}")

