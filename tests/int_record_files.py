"""ArrayRecord files of int32 records numbered across the files, for the tests that read
them back (``tests/conftest.py`` puts this folder on ``sys.path``)."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter


def write_int_parts(tmp: pathlib.Path, ends: Sequence[int]) -> list[str]:
    """Files ``part-0.array_record``, ``part-1...`` in ``tmp``: file ``f`` holds the
    records ``np.int32(i).tobytes()`` for ``ends[f - 1] <= i < ends[f]`` (from 0)."""
    paths, lo = [], 0
    for f, hi in enumerate(ends):
        path = str(tmp / f"part-{f}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in range(lo, hi):
            writer.write(np.int32(i).tobytes())
        writer.close()
        paths.append(path)
        lo = hi
    return paths
