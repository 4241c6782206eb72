"""``ranged_reads=True`` downloads no file, so its cache need hold none: a global shuffle
read by range through a cache smaller than one shard serves the local files' order (it
was refused when built, the message suggesting the ranged_reads=True it was given)."""

from __future__ import annotations

import os

import numpy as np
import pytest

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("array_record")

from datarax.dataset import write_dataset  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402
from datarax.storage import CacheFullError, ShardCache  # noqa: E402

CONFIG = ArrayRecordSourceConfig(shuffle_files=True, seed=7)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[str, str, int]:
    """A 4-shard dataset, local and at ``memory://``; the smallest shard's bytes."""
    folder = str(tmp_path_factory.mktemp("ranged_small") / "ds")
    rng = np.random.default_rng(0)
    write_dataset([{"i": np.int32(i), "pad": rng.integers(0, 255, 500, dtype=np.uint8)}
                   for i in range(200)], folder, shards=4)
    sizes = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            fsspec.filesystem("memory").pipe(f"/ranged-small/ds/{name}", f.read())
        if name.endswith(".array_record"):
            sizes.append(os.path.getsize(os.path.join(folder, name)))
    return folder, "memory://ranged-small/ds", min(sizes)


def test_a_global_shuffle_by_range_needs_no_room_for_a_file(dataset, tmp_path) -> None:
    folder, url, smallest = dataset
    with ArrayRecordSourceModule(CONFIG, folder) as local:
        expected = local.get_batch(200)["i"].tolist()
    limit = smallest // 4
    with ArrayRecordSourceModule(CONFIG, url, ranged_reads=True,
                                 cache=ShardCache(tmp_path, max_bytes=limit)) as remote:
        assert remote.get_batch(200)["i"].tolist() == expected
        assert remote.stats()["storage"]["fetched"] == 0
        assert remote.stats()["storage"]["ranged_budget_left"] is None  # no budget to spend
    with pytest.raises(CacheFullError, match="is larger than the cache limit"):  # downloads
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), url,
                                cache=ShardCache(tmp_path / "whole", max_bytes=limit))


def test_a_file_larger_than_the_cache_read_in_order_is_told_to_read_it_in_parts(
        dataset, tmp_path) -> None:
    folder, url, smallest = dataset
    limit = smallest // 4
    with pytest.raises(CacheFullError) as err:  # in order: one file at a time already
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), url,
                                cache=ShardCache(tmp_path, max_bytes=limit))
    message = str(err.value)
    assert f"is larger than the cache limit of {limit} bytes" in message
    assert "read fewer files at once" not in message  # it reads one already
    assert message.endswith("or read the files in parts (shuffle_files=True, shuffle_window=W, "
                            "shuffle_block='8M' downloads blocks of 8 MB: the cache then needs "
                            "about two windows of blocks; or ArrayRecordSourceModule(..., "
                            "ranged_reads=True) reads records by byte range and downloads no "
                            "file).")
    in_order = ArrayRecordSourceConfig()  # what it suggests reads through that cache
    with ArrayRecordSourceModule(in_order, url, ranged_reads=True,
                                 cache=ShardCache(tmp_path / "ranged", max_bytes=limit)) as remote:
        with ArrayRecordSourceModule(in_order, folder) as local:
            assert remote.get_batch(200)["i"].tolist() == local.get_batch(200)["i"].tolist()
