"""ArrayRecord files for the tests that read them back: the one writer the tests share
(``tests/conftest.py`` puts this folder on ``sys.path``).

``write_records`` writes one file of given records (``read_records`` reads them back);
``write_parts`` writes one file per run of record ids, each record ``encode(i)``;
``write_int_parts`` is the common case of ``int32`` ids numbered across the files;
``damaged_copy`` copies a file with bytes inside its record chunks flipped;
``numbered_in_memory`` writes numbered 3 KB records and copies the files to fsspec's
``memory://`` store (a bucket without a server).
``array_record`` is imported on first use, so a module that only may write
(``bad_inputs.py``) imports this one without it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

GROUP_1 = "group_size:1"  # one record a chunk: what the tests' reads by index expect


def write_records(path: str | os.PathLike[str], records: Iterable[bytes],
                  options: str = GROUP_1) -> str:
    """One ArrayRecord file at ``path`` holding ``records`` in order (writer ``options``);
    returns ``str(path)``."""
    from array_record.python.array_record_module import ArrayRecordWriter

    path = str(path)
    writer = ArrayRecordWriter(path, options)
    try:
        for record in records:
            writer.write(record)
    finally:
        writer.close()
    return path


def read_records(path: str | os.PathLike[str]) -> list[bytes]:
    """Every record of the ArrayRecord file ``path``, in order."""
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(path))
    try:
        return reader.read(list(range(reader.num_records())))
    finally:
        reader.close()


def damaged_copy(good: str | os.PathLike[str],
                 bad: str | os.PathLike[str]) -> tuple[str, list[int]]:
    """A copy of the ArrayRecord file ``good`` at ``bad`` with 200 bytes inside its record
    chunks flipped (files are padded to 64 KiB); returns ``str(bad)`` and the indices of
    the records that no longer read (at least one)."""
    data = bytearray(pathlib.Path(good).read_bytes())
    for k in range(1000, 1200):
        data[k] ^= 0xFF
    pathlib.Path(bad).write_bytes(bytes(data))
    unreadable = unreadable_records(bad)
    assert unreadable, "the damage should hit at least one record"
    return str(bad), unreadable


def unreadable_records(path: str | os.PathLike[str]) -> list[int]:
    """The indices of the records of the ArrayRecord file ``path`` that do not read."""
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(path))
    unreadable = []
    try:
        for i in range(reader.num_records()):
            try:
                reader.read([i])
            except RuntimeError:
                unreadable.append(i)
    finally:
        reader.close()
    return unreadable


def runs(sizes: Sequence[int], start: int = 0) -> list[range]:
    """Consecutive runs of ids of the given ``sizes`` from ``start``: ``runs([2, 3])`` is
    ``[range(0, 2), range(2, 5)]``."""
    out = []
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def write_parts(folder: str | os.PathLike[str], parts: Sequence[Iterable[int]],
                encode: Callable[[int], bytes], name: str = "part-{}.array_record") -> list[str]:
    """File ``name.format(f)`` in ``folder`` holds ``encode(i)`` for each ``i`` of
    ``parts[f]``; returns the paths in file order."""
    folder = pathlib.Path(folder)
    return [write_records(folder / name.format(f), map(encode, ids))
            for f, ids in enumerate(parts)]


@contextlib.contextmanager
def numbered_in_memory(folder: str | os.PathLike[str], bucket: str, files: int,
                       per_file: int) -> Iterator[list[str]]:
    """``files`` files of ``per_file`` records each (record ``i``: ``int32(i)``, then 3 KB
    of random bytes) in ``folder``, also in ``memory://{bucket}`` until the block ends;
    yields the local paths."""
    import fsspec

    rng = random.Random(0)
    paths = write_parts(folder, [range(f * per_file, (f + 1) * per_file) for f in range(files)],
                        lambda i: np.int32(i).tobytes() + rng.randbytes(3072))
    memory = fsspec.filesystem("memory")
    for path in paths:
        memory.pipe(f"{bucket}/{pathlib.Path(path).name}", pathlib.Path(path).read_bytes())
    try:
        yield paths
    finally:
        memory.rm(bucket, recursive=True)


def int32(i: int) -> bytes:
    """Record ``i`` as ``np.int32(i).tobytes()``."""
    return np.int32(i).tobytes()


def write_int_parts(tmp: pathlib.Path, ends: Sequence[int]) -> list[str]:
    """Files ``part-0.array_record``, ``part-1...`` in ``tmp``: file ``f`` holds the
    records ``np.int32(i).tobytes()`` for ``ends[f - 1] <= i < ends[f]`` (from 0)."""
    return write_parts(tmp, [range(lo, hi) for lo, hi in zip([0, *ends[:-1]], ends)], int32)


def int_decode(field: str = "x") -> Callable[[bytes], dict[str, np.ndarray]]:
    """The decode of an ``int32`` record: ``{field: np.int32}``."""

    def decode(record: bytes) -> dict[str, np.ndarray]:
        return {field: np.frombuffer(record, np.int32)[0]}

    return decode


def int_source(paths: Sequence[str], field: str = "x", **settings: object) -> object:
    """An ``ArrayRecordSourceModule`` over ``int32`` records (:func:`int_decode`);
    ``settings`` are its keywords, config fields and options alike
    (``seed=5, shuffle_files=True, num_threads=2``)."""
    from datarax.sources import ArrayRecordSourceModule

    return ArrayRecordSourceModule(paths=paths, decode=int_decode(field), **settings)
