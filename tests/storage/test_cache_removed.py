"""A shard cache folder removed while a source reads through it (a cleanup of ~/.cache or
/tmp) is made again at the next download: the epoch completes. It was a RecordError
blaming the next remote file (its lock file's FileNotFoundError), a skip of every file
left under on_error='skip'."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("array_record")

from datarax.dataset import write_dataset  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402
from datarax.storage import ShardCache  # noqa: E402


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_cache_folder_removed_mid_epoch_is_made_again(tmp_path, on_error) -> None:
    folder = tmp_path / "ds"
    rng = np.random.default_rng(0)
    write_dataset([{"i": np.int32(i), "pad": rng.integers(0, 255, 3000, dtype=np.uint8)}
                   for i in range(160)], folder, shards=8)
    for name in os.listdir(folder):
        fsspec.filesystem("memory").pipe(f"/cache-removed-{on_error}/ds/{name}",
                                         (folder / name).read_bytes())
    shard = (folder / "data-00000-of-00008.array_record").stat().st_size
    cache = tmp_path / "cache"
    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=1, seed=0, on_error=on_error),
        f"memory://cache-removed-{on_error}/ds", cache=ShardCache(cache, max_bytes=3 * shard),
        num_threads=1, read_ahead=1)
    with source:
        batches = iter(Pipeline(source, batch_size=8))
        served = next(batches)["i"].tolist()
        # one cleanup removes the folder (moved away at once, then deleted: a read-ahead
        # download may be writing into it meanwhile)
        gone = tmp_path / "removed-cache"
        os.rename(cache, gone)
        shutil.rmtree(gone)
        served += [i for batch in batches for i in batch["i"].tolist()]
        assert sorted(served) == list(range(160))
        assert source.skipped_records() == [], source.skipped_records()
    assert {"locks", "shards", "tmp"} <= set(os.listdir(cache))  # made again
