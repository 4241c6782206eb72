"""The shard cache, the fetcher and read-ahead, over fsspec's memory filesystem (no server)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
import time

import fsspec
import numpy as np
import pytest

from datarax.storage import (
    CacheFullError,
    Fetcher,
    RemoteObject,
    RemoteObjectError,
    RemoteShards,
    RetryPolicy,
    ShardCache,
    StorageStats,
    list_objects,
    parse_bytes,
)

MEM = fsspec.filesystem("memory")
FAST = RetryPolicy(initial_delay=0.0, max_delay=0.0)


def _writer(data: bytes, log: list[str] | None = None):
    def download(part: str) -> None:
        if log is not None:
            log.append(part)
        with open(part, "r+b") as f:
            f.write(data)
    return download


def _put(prefix: str, blobs: dict[str, bytes]) -> None:
    for name, data in blobs.items():
        MEM.pipe(f"/{prefix}/{name}", data)


def _wait(cond, what: str, limit: float = 10.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


# ------------------------------------------------------------------ the cache
def test_reused_across_restarts_and_verified_entries_only(tmp_path):
    obj = RemoteObject("memory://x/a.bin", 3, etag="1")
    log: list[str] = []
    with ShardCache(tmp_path, max_bytes=100).acquire(obj, _writer(b"abc", log)) as entry:
        assert open(entry.path, "rb").read() == b"abc"
    stats = StorageStats()
    again = ShardCache(tmp_path, max_bytes=100)  # a new process would build the same
    with again.acquire(obj, _writer(b"zzz", log), stats=stats) as entry:
        assert open(entry.path, "rb").read() == b"abc"
    assert len(log) == 1 and stats.snapshot()["cache_hits"] == 1
    # a changed version tag is another entry
    with again.acquire(RemoteObject("memory://x/a.bin", 3, etag="2"), _writer(b"new")) as entry:
        assert open(entry.path, "rb").read() == b"new"
    assert not os.listdir(tmp_path / "tmp")


def test_nothing_created_before_first_use(tmp_path):
    ShardCache(tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_eviction_is_lru_and_never_removes_held_entries(tmp_path):
    cache = ShardCache(tmp_path, max_bytes=12)
    objs = [RemoteObject(f"memory://x/{i}.bin", 4, etag="1") for i in range(5)]
    held = cache.acquire(objs[0], _writer(b"0000"))
    for i in (1, 2):
        cache.acquire(objs[i], _writer(bytes([48 + i]) * 4)).release()
    os.utime(cache.path_of(objs[1]), (1, 1))  # 1 is the least recently used
    stats = StorageStats()
    cache.acquire(objs[3], _writer(b"3333"), stats=stats).release()
    assert cache.path_of(objs[0]) and cache.path_of(objs[2]) and cache.path_of(objs[3])
    assert cache.path_of(objs[1]) is None and stats.snapshot()["evicted"] == 1
    assert cache.usage() == 12
    held.release()
    cache.acquire(objs[4], _writer(b"4444")).release()
    assert cache.path_of(objs[0]) is None  # released, now the oldest


def test_full_of_held_entries_is_a_clear_error_and_leaves_nothing(tmp_path):
    cache = ShardCache(tmp_path, max_bytes=8)
    a = cache.acquire(RemoteObject("memory://x/a", 4, etag="1"), _writer(b"aaaa"))
    b = cache.acquire(RemoteObject("memory://x/b", 4, etag="1"), _writer(b"bbbb"))
    with pytest.raises(CacheFullError, match=r"memory://x/c.*files in use"):
        cache.acquire(RemoteObject("memory://x/c", 4, etag="1"), _writer(b"cccc"))
    with pytest.raises(CacheFullError, match="larger than the cache limit"):
        cache.acquire(RemoteObject("memory://x/big", 9, etag="1"), _writer(b"x" * 9))
    assert sorted(os.listdir(tmp_path / "shards")) == sorted(
        os.path.basename(e.path) for e in (a, b)) and not os.listdir(tmp_path / "tmp")
    a.release()
    b.release()


def test_full_disk_is_a_clear_error_never_a_corrupt_entry(tmp_path):
    cache = ShardCache(tmp_path, max_bytes=100)
    obj = RemoteObject("memory://x/a.bin", 6, etag="1")

    def disk_full(part: str) -> None:
        with open(part, "r+b") as f:
            f.write(b"abc")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CacheFullError, match=r"local disk .* is full .*memory://x/a.bin"):
        cache.acquire(obj, disk_full)
    assert cache.path_of(obj) is None
    assert not os.listdir(tmp_path / "shards") and not os.listdir(tmp_path / "tmp")
    with cache.acquire(obj, _writer(b"abcdef")) as entry:  # the next try starts clean
        assert open(entry.path, "rb").read() == b"abcdef"


def test_a_crashed_download_is_cleaned_by_the_next_process(tmp_path):
    cache = ShardCache(tmp_path, max_bytes=100)
    cache.acquire(RemoteObject("memory://x/a", 1, etag="1"), _writer(b"a")).release()
    (tmp_path / "tmp" / "dead-x.part").write_bytes(b"\0" * 50)  # no process holds it
    cache.acquire(RemoteObject("memory://x/b", 1, etag="1"), _writer(b"b")).release()
    assert not os.listdir(tmp_path / "tmp") and cache.usage() == 2


def test_two_processes_share_one_cache_and_download_once(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        from datarax.storage import RemoteObject, ShardCache
        def download(part):
            with open({str(tmp_path / 'log')!r}, "a") as f:
                f.write(str(os.getpid()) + "\\n")
            time.sleep(0.5)
            with open(part, "r+b") as f:
                f.write(b"shared!")
        cache = ShardCache({str(tmp_path / 'cache')!r}, max_bytes=1000)
        with cache.acquire(RemoteObject("s3://b/k", 7, etag="e"), download) as e:
            sys.stdout.write(open(e.path, "rb").read().decode())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [o.decode() for o, _ in outs] == ["shared!", "shared!"], [e for _, e in outs]
    assert len((tmp_path / "log").read_text().split()) == 1  # one download for both


def test_parse_bytes():
    assert parse_bytes("20G") == 20 << 30 and parse_bytes("512MiB") == 512 << 20
    with pytest.raises(Exception, match="20G, 512M"):
        parse_bytes("lots")


# ---------------------------------------------------------------- the fetcher
def _read(path, start, end):
    with MEM.open(path, "rb") as f:
        return f.read()[start:end]


def test_throttling_is_retried_and_a_reset_resumes_from_the_bytes_written(tmp_path, monkeypatch):
    data = bytes(range(20))
    _put("fetch", {"a.bin": data})
    ranges: list[tuple[int, int]] = []

    def cat_file(path, start=None, end=None, **kw):
        ranges.append((start, end))
        if len(ranges) == 1:
            raise OSError("503 SlowDown: Please reduce your request rate.")
        if len(ranges) == 3:  # the second chunk: the connection drops mid-object
            raise ConnectionResetError("Connection reset by peer")
        return _read(path, start, end)

    monkeypatch.setattr(MEM, "cat_file", cat_file)
    fetcher = Fetcher(retry=FAST, chunk=8)
    obj = RemoteObject("memory://fetch/a.bin", 20, sha256=hashlib.sha256(data).hexdigest())
    part = tmp_path / "a.part"
    part.write_bytes(b"\0" * 20)
    fetcher.download(obj, str(part))
    assert part.read_bytes() == data
    assert ranges == [(0, 8), (0, 8), (8, 16), (8, 16), (16, 20)]
    s = fetcher.stats.snapshot()
    assert (s["retries"], s["throttled"], s["resumed"], s["fetched"]) == (2, 1, 1, 1)


def test_retries_give_up_naming_the_file(tmp_path, monkeypatch):
    _put("giveup", {"a.bin": b"abcd"})

    def cat_file(path, start=None, end=None, **kw):
        raise TimeoutError("read timed out")

    monkeypatch.setattr(MEM, "cat_file", cat_file)
    part = tmp_path / "a.part"
    part.write_bytes(b"\0" * 4)
    fetcher = Fetcher(retry=RetryPolicy(max_retries=3, initial_delay=0.0))
    with pytest.raises(RemoteObjectError, match=r"memory://giveup/a.bin.*after 3 retries"):
        fetcher.download(RemoteObject("memory://giveup/a.bin", 4), str(part))
    assert fetcher.stats.snapshot()["retries"] == 3


# --------------------------------------------------------- files and read-ahead
def _shards(tmp_path, prefix, n=6, size=10, **kw):
    _put(prefix, {f"{i}.bin": bytes([i]) * size for i in range(n)})
    objects = list_objects(f"memory://{prefix}/*.bin")
    return RemoteShards(objects, cache=ShardCache(tmp_path / "c", max_bytes=kw.pop("limit", 1000)),
                        retry=FAST, **kw)


def test_checksum_mismatch_and_deletion_name_the_file_and_are_remembered(tmp_path):
    _put("bad", {"a.bin": b"abcd", "b.bin": b"efgh"})
    a, b = list_objects("memory://bad/*.bin")
    a = RemoteObject(a.url, a.size, sha256="0" * 64)
    shards = RemoteShards([a, b], cache=ShardCache(tmp_path, max_bytes=100), retry=FAST)
    MEM.rm("/bad/b.bin")
    for _ in range(2):
        with pytest.raises(RemoteObjectError, match=r"'memory:///?bad/a.bin' changed.*SHA-256"):
            shards.local_path(0)
        with pytest.raises(RemoteObjectError, match=r"'memory:///?bad/b.bin' was deleted"):
            shards.local_path(1)
    assert shards.stats()["failed"] == 2 and sorted(shards.failed()) == [a.url, b.url]
    assert not os.listdir(tmp_path / "shards") and not os.listdir(tmp_path / "tmp")
    shards.close()


def test_a_file_changed_after_listing_is_refused(tmp_path):
    _put("chg", {"a.bin": b"abcd"})
    (obj,) = list_objects("memory://chg/a.bin")
    time.sleep(0.002)
    MEM.pipe("/chg/a.bin", b"wxyz")  # same size, new version
    shards = RemoteShards([obj], cache=ShardCache(tmp_path, max_bytes=100), retry=FAST)
    with pytest.raises(RemoteObjectError, match="changed in the store since"):
        shards.local_path(0)
    shards.close()


def test_read_ahead_fetches_the_next_files_in_epoch_order(tmp_path):
    shards = _shards(tmp_path, "ahead", threads=1, ahead=2)
    ends = np.arange(1, 7) * 10  # 10 records per file
    order = np.array([5, 4, 3, 2, 1, 0])  # the epoch reads the files backwards
    shards.plan(lambda a, b: (order[np.arange(a, b) // 10] * 10 + np.arange(a, b) % 10), 0, 60,
                ends)
    assert shards.upcoming() == [5, 4]
    cached = lambda: {i for i in range(6) if shards.cache.path_of(shards.objects[i])}  # noqa: E731
    _wait(lambda: cached() == {4, 5}, "two files read ahead")
    assert shards.stats()["fetched"] == 2
    with shards.open(5, lambda p: open(p, "rb")) as f:  # the reader reaches file 5
        assert f.read() == bytes([5]) * 10
    _wait(lambda: cached() == {3, 4, 5}, "the next file read ahead")
    assert shards.upcoming() == [4, 3] and shards.stats()["fetched"] == 3
    assert shards.stats()["cache_hits"] == 0
    shards.close()


def test_each_process_reads_ahead_only_its_share(tmp_path):
    shards = _shards(tmp_path, "share", threads=2, ahead=6)
    ends = np.arange(1, 7) * 10
    shards.plan(lambda a, b: np.arange(a, b) + 30, 0, 30, ends)  # positions of host 1 of 2
    assert shards.upcoming() == [3, 4, 5]
    _wait(lambda: [i for i in range(6) if shards.cache.path_of(shards.objects[i])] == [3, 4, 5],
          "the share read ahead")
    time.sleep(0.05)  # nothing else follows
    assert shards.stats()["fetched"] == 3
    shards.close()


def test_a_cache_smaller_than_the_files_evicts_the_passed_ones(tmp_path):
    shards = _shards(tmp_path, "small", threads=1, ahead=1, limit=25, handles=1)
    shards.plan(lambda a, b: np.arange(a, b), 0, 60, np.arange(1, 7) * 10)
    for i in range(6):
        with shards.open(i, lambda p: open(p, "rb")) as f:
            assert f.read() == bytes([i]) * 10
        assert shards.cache.usage() <= 25
    s = shards.stats()
    assert s["evicted"] >= 3 and s["fetched"] == 6
    shards.close()


# ------------------------------------------------------- through ArrayRecordSourceModule
def _remote_dataset(tmp_path, prefix, records=40, shards=4):
    from datarax.dataset.writer import write_dataset

    local = tmp_path / "local"
    write_dataset([{"x": np.int32([i, -i])} for i in range(records)], local, shards=shards)
    MEM.put(str(local), f"/{prefix}/ds", recursive=True)
    sizes = sorted(os.path.getsize(p) for p in local.glob("*.array_record"))
    return f"memory://{prefix}/ds", sizes[-1]


def test_array_record_source_reads_a_remote_dataset_through_a_smaller_cache(tmp_path):
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    url, shard = _remote_dataset(tmp_path, "src-small")
    cache = ShardCache(tmp_path / "cache", max_bytes=int(2.5 * shard))
    src = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), url, cache=cache)
    assert [int(r["x"][0]) for r in src] == list(range(40))
    storage = src.stats()["storage"]
    assert storage["fetched"] == 4 and storage["evicted"] >= 1 and cache.usage() <= cache.max_bytes
    src.close()
    config = ArrayRecordSourceConfig(num_epochs=1, seed=3, shuffle_files=True)
    big = ShardCache(tmp_path / "big")
    for run in range(2):  # a restart finds every shard cached
        again = ArrayRecordSourceModule(config, url + "/data-*.array_record", cache=big)
        assert sorted(int(r["x"][0]) for r in again) == list(range(40))
        storage = again.stats()["storage"]
        assert storage["fetched"] == (4 if run == 0 else 0) and storage["cache_hits"] >= 4 * run
        again.close()


def test_a_remote_shard_changed_mid_run_is_skipped_and_counted(tmp_path):
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    url, _ = _remote_dataset(tmp_path, "src-skip")
    MEM.pipe("/src-skip/ds/data-00001-of-00004.array_record", b"rewritten")
    config = ArrayRecordSourceConfig(num_epochs=1, on_error="skip")
    src = ArrayRecordSourceModule(config, url, cache=ShardCache(tmp_path / "cache"))
    got = [int(r["x"][0]) for r in src]
    assert got == [i for i in range(40) if not 10 <= i < 20]
    assert src.get_state()["skipped"] == 10
    assert src.stats()["storage"]["failed"] == 1
    src.close()
    strict = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), url,
                                     cache=ShardCache(tmp_path / "cache"))
    with pytest.raises(Exception, match=r"data-00001-of-00004.array_record' changed"):
        list(strict)
    strict.close()
