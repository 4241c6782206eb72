"""A datarax dataset named by the URL of one of its shards (``file://`` or another fsspec
filesystem) reads as the same shard named by its local path: its metadata is found in
the shard's folder (a ``file://`` shard raised NotADirectoryError, looking for the
metadata under the shard as if it were a folder)."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

from datarax.dataset.writer import write_dataset
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("urls") / "ds"
    write_dataset([{"x": np.float32([i, -i]), "label": i} for i in range(5)], str(folder),
                  shards=2)
    return folder


def _records(path):
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, num_threads=1)
    try:
        batch = source.get_batch(8)
        return len(source), batch["x"].tolist(), batch["label"].tolist()
    finally:
        source.close()


def test_a_shard_by_its_file_url_reads_as_by_its_path(dataset):
    shard = dataset / "data-00001-of-00002.array_record"
    local = _records(str(shard))
    assert local[0] == 3 and local[2] == [2, 3, 4]  # the second shard: records 2-4
    assert _records(f"file://{shard}") == local
    fsspec.filesystem("memory").put(str(dataset), "/urls-test/ds", recursive=True)
    assert _records("memory://urls-test/ds/data-00001-of-00002.array_record") == local


@pytest.mark.parametrize("pattern", ["ds/**/*.array_record", "d*/data-*", "**/data-0000[01]-*"])
def test_a_pattern_across_folders_of_a_datasets_shards_reads_it_by_its_metadata(dataset, pattern):
    # "ds/**/*.array_record": the files' one folder holds the metadata (its fields, not
    # raw bytes), on a disk as in a bucket
    whole = _records(str(dataset))
    assert whole[0] == 5 and whole[2] == [0, 1, 2, 3, 4]
    assert _records(str(dataset.parent / pattern)) == whole
    fsspec.filesystem("memory").put(str(dataset), "/across-test/ds", recursive=True)
    try:
        assert _records(f"memory://across-test/{pattern}") == whole
    finally:
        fsspec.filesystem("memory").rm("/across-test", recursive=True)
