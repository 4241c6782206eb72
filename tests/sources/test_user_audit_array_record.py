"""ArrayRecord as users call it: relative paths, a working directory that changes.

The guide builds its source from a relative path ("path/to/arrayrecord/file"); a
training script that changes directory afterwards (a logging or checkpoint library, a
job launcher) must still read the same files.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from flax import nnx

pytest.importorskip("array_record.python.array_record_module")

from int_record_files import write_records  # noqa: E402

from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402


def write(path, ids) -> None:
    write_records(path, (np.array([i], np.float32).tobytes() for i in ids))


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"features": np.frombuffer(record, dtype=np.float32)}


@pytest.mark.parametrize("paths", ["path/to/arrayrecord/file-*", "path/to/arrayrecord/file-0",
                                   ["path/to/arrayrecord/file-0", "path/to/arrayrecord/file-1"]])
def test_relative_paths_are_read_after_the_working_directory_changes(tmp_path, monkeypatch, paths):
    folder = tmp_path / "path" / "to" / "arrayrecord"
    folder.mkdir(parents=True)
    write(folder / "file-0", range(5))
    write(folder / "file-1", range(5, 9))
    monkeypatch.chdir(tmp_path)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths, decode=decode)
    expected = list(range(5)) if paths == "path/to/arrayrecord/file-0" else list(range(9))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    for _ in range(2):
        got = [int(v) for b in pipeline for v in np.asarray(b["features"])[:, 0]]
        assert got == expected
    assert os.path.isabs(source.locate(0)[0])
    source.close()
