"""``source.stats()["storage"]`` holds the counters docs/object-storage.md names, with
values that add up: an epoch in file order downloads each file once (its bytes are the
files' bytes), a second source on the same cache downloads none and finds each file
there, each pass counts a hit for each file it did not download (once, whoever took it:
reader or read-ahead), and a few records by range ask for far fewer bytes than the files
hold."""

from __future__ import annotations

import os

import numpy as np
import pytest

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("array_record")

from datarax.dataset import write_dataset  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402
from datarax.storage import ShardCache  # noqa: E402

RECORDS, SHARDS = 300, 3
DOCUMENTED = {"fetched", "fetched_bytes", "cache_hits", "retries", "throttled", "resumed",
              "evicted", "failed", "wait_s", "held", "cache_dir", "ranged_requests",
              "ranged_bytes", "ranged_records", "ranged_budget_left"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[str, int]:
    """A 3-shard dataset at ``memory://`` (about 0.9 MB a shard); its shards' bytes."""
    folder = str(tmp_path_factory.mktemp("counters") / "ds")
    rng = np.random.default_rng(0)
    write_dataset([{"i": np.int32(i), "pad": rng.integers(0, 255, 9000, dtype=np.uint8)}
                   for i in range(RECORDS)], folder, shards=SHARDS)
    total = 0
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        fsspec.filesystem("memory").pipe(f"/storage-counters/ds/{name}", data)
        if name.endswith(".array_record"):
            total += len(data)
    return "memory://storage-counters/ds", total


def test_an_epoch_in_file_order_downloads_each_file_once_then_finds_them(
        dataset, tmp_path) -> None:
    url, total = dataset
    with ArrayRecordSourceModule(ArrayRecordSourceConfig(), url,
                                 cache=ShardCache(tmp_path)) as first:
        assert first.get_batch(RECORDS)["i"].tolist() == list(range(RECORDS))
        storage = first.stats()["storage"]
    assert DOCUMENTED <= set(storage)
    assert (storage["fetched"], storage["fetched_bytes"], storage["cache_hits"]) == (
        SHARDS, total, 0)
    assert (storage["failed"], storage["ranged_requests"], storage["cache_dir"]) == (
        0, 0, str(tmp_path))
    with ArrayRecordSourceModule(ArrayRecordSourceConfig(), url,
                                 cache=ShardCache(tmp_path)) as second:
        assert second.get_batch(RECORDS)["i"].tolist() == list(range(RECORDS))
        storage = second.stats()["storage"]
    assert (storage["fetched"], storage["fetched_bytes"], storage["cache_hits"]) == (
        0, 0, SHARDS)


@pytest.mark.parametrize("shuffled", [False, True])
def test_each_pass_counts_one_hit_for_each_file_it_did_not_download(
        dataset, tmp_path, shuffled) -> None:
    # read-ahead takes files before their reader (or after, or not at all): the counts
    # are the same whoever took a file first
    url, _ = dataset
    config = ArrayRecordSourceConfig(num_epochs=3, shuffle_files=shuffled, seed=1)
    for run in range(2):
        with ArrayRecordSourceModule(config, url, cache=ShardCache(tmp_path)) as source:
            values = [int(r["i"]) for r in source]
            storage = source.stats()["storage"]
        assert sorted(values) == sorted(list(range(RECORDS)) * 3)
        # the first run downloads each file in its first pass and finds them in the other
        # two; the second finds every file in every pass
        assert (storage["fetched"], storage["cache_hits"], storage["evicted"]) == (
            (SHARDS, 2 * SHARDS, 0) if run == 0 else (0, 3 * SHARDS, 0))


def test_one_reader_thread_in_file_order_through_a_cache_of_two_files_fetches_each_once(
        dataset, tmp_path) -> None:
    # read-ahead keeps room for one more file and never evicts what it read ahead, the
    # reader evicts passed files first: nothing fetched twice. (Several reader threads
    # read chunks spanning several files at once: a cache smaller than those files
    # evicts one a slower thread still reads, fetched again, as docs/object-storage.md says.)
    url, total = dataset
    largest = max(info["size"] for info in fsspec.filesystem("memory").ls(
        "/storage-counters/ds", detail=True) if info["name"].endswith(".array_record"))
    config = ArrayRecordSourceConfig(num_epochs=1)
    with ArrayRecordSourceModule(config, url, num_threads=1,
                                 cache=ShardCache(tmp_path, max_bytes=2 * largest)) as source:
        assert [int(r["i"]) for r in source] == list(range(RECORDS))
        storage = source.stats()["storage"]
    # an empty cache: each file fetched at least once, so SHARDS fetches are one each
    assert (storage["fetched"], storage["fetched_bytes"], storage["cache_hits"]) == (
        SHARDS, total, 0)
    assert storage["evicted"] == SHARDS - 2


def test_a_few_records_by_range_ask_for_a_fraction_of_the_bytes(dataset, tmp_path) -> None:
    url, total = dataset
    with ArrayRecordSourceModule(ArrayRecordSourceConfig(), url, ranged_reads=True,
                                 cache=ShardCache(tmp_path)) as remote:
        assert remote.get_batch(5)["i"].tolist() == list(range(5))
        storage = remote.stats()["storage"]
    assert DOCUMENTED <= set(storage)
    assert (storage["fetched"], storage["fetched_bytes"], storage["ranged_budget_left"]) == (
        0, 0, None)
    assert storage["ranged_records"] >= 5 and storage["ranged_requests"] >= 2  # footer, chunk
    assert 0 < storage["ranged_bytes"] < total // 2
