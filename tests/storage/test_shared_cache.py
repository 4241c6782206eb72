"""Readers sharing one cache folder (several sources in a process, or processes): one
reader's read-ahead never takes the room another reader needs for the files it reads."""

from __future__ import annotations

import os
import threading
import time

import fsspec
import numpy as np
import pytest

from datarax.storage import CacheFullError, RemoteShards, RetryPolicy, ShardCache, list_objects

MEM = fsspec.filesystem("memory")
FAST = RetryPolicy(initial_delay=0.0, max_delay=0.0)


def _reader(tmp_path, prefix: str, limit: int, behind: int = 2, plan: bool = True) -> RemoteShards:
    """Six files of 10 bytes (file ``i`` holds ``prefix[0]`` and ``i``), read in order, a
    window of ``behind`` files."""
    for i in range(6):
        MEM.pipe(f"/{prefix}/{i}.bin", prefix[:1].encode() * 5 + bytes([i]) * 5)
    shards = RemoteShards(list_objects(f"memory://{prefix}/*.bin"),
                          cache=ShardCache(tmp_path / "cache", max_bytes=limit),
                          behind=behind, ahead=4, threads=2, retry=FAST)
    if plan:
        _plan(shards)
    return shards


def _plan(shards: RemoteShards) -> None:
    shards.plan(lambda a, b: np.arange(a, b), 0, 60, np.arange(1, 7) * 10)


def _read(shards: RemoteShards, i: int) -> bytes:
    with shards.open(i, lambda p: open(p, "rb")) as f:  # a handle kept open between reads
        return os.pread(f.fileno(), 100, 0)


def _settle(shards: RemoteShards, fetched: int) -> None:
    end = time.monotonic() + 60
    while shards.stats()["fetched"] < fetched:
        assert time.monotonic() < end, "read-ahead never finished"
        time.sleep(0.005)


def test_another_readers_read_ahead_gives_way_to_the_files_a_reader_needs(tmp_path):
    # the documented minimum for two readers with a window of 2 files: 2 + 2 + 1 files
    first = _reader(tmp_path, "ahead-first", limit=50)
    assert [_read(first, i) for i in (0, 1)] == [b"a" * 5 + bytes([i]) * 5 for i in (0, 1)]
    _settle(first, 4)  # its window and two files read ahead: 40 of the 50 bytes
    second = _reader(tmp_path, "ahead-second", limit=50, plan=False)
    downloads: list[str] = []
    download = second.fetcher.download

    def counted(obj, part):
        downloads.append(obj.name)
        download(obj, part)

    second.fetcher.download = counted
    _plan(second)
    # the window's two files, records taken from both in turn: each fetched once, both kept
    got = [_read(second, i) for i in (0, 1, 0, 1, 0, 1)]
    assert got == [b"a" * 5 + bytes([i]) * 5 for i in (0, 1)] * 3
    assert (downloads.count("0.bin"), downloads.count("1.bin")) == (1, 1)
    assert second.stats()["held"] == 2
    # the first reader fetches again what it had read ahead, and reads the right bytes
    assert [_read(first, i) for i in range(2, 6)] == [b"a" * 5 + bytes([i]) * 5
                                                     for i in range(2, 6)]
    first.close()
    second.close()


def test_two_readers_moving_through_their_windows_at_once_share_the_minimum(tmp_path):
    readers = [_reader(tmp_path, f"{name}-together", limit=50) for name in ("x", "y")]
    got: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            out = []
            for epoch in range(3):
                _plan(readers[k])
                for w in range(3):  # the windows (0, 1), (2, 3), (4, 5), records in turn
                    out += [_read(readers[k], i) for i in (2 * w, 2 * w + 1) * 2]
            got[k] = out
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k, name in enumerate("xy"):
        want = [name.encode() * 5 + bytes([i]) * 5
                for w in range(3) for i in (2 * w, 2 * w + 1) * 2]
        assert got[k] == want * 3, k
        readers[k].close()


def test_a_file_read_after_the_reader_moved_past_it_is_not_held_after_the_read(tmp_path):
    shards = _reader(tmp_path, "late", limit=1000, behind=1)
    assert _read(shards, 1) == b"l" * 5 + bytes([1]) * 5  # the reader is at file 1
    assert _read(shards, 0) == b"l" * 5 + bytes([0]) * 5  # a late record of file 0
    # file 0 is behind the window: it does not keep room from other readers of the folder
    assert shards.stats()["held"] == 1
    shards.close()


def test_close_stops_a_download_at_its_next_range_and_keeps_nothing_partial(tmp_path,
                                                                               monkeypatch):
    MEM.pipe("/close-mid/big.bin", bytes(range(100)))
    shards = RemoteShards(list_objects("memory://close-mid/big.bin"),
                          cache=ShardCache(tmp_path / "cache", max_bytes=1000), retry=FAST)
    shards.fetcher.chunk = 10  # ten range requests, one at a time
    shards.fetcher.parallel = 1
    requests, closing = [], threading.Event()
    cat_file = type(MEM).cat_file  # each thread has its own memory filesystem object

    def slow_cat_file(fs, path, start=None, end=None, **kw):
        requests.append((start, end))
        closing.set()
        end_wait = time.monotonic() + 60
        while not shards._closed and time.monotonic() < end_wait:  # until close() begins
            time.sleep(0.005)
        return cat_file(fs, path, start=start, end=end, **kw)

    monkeypatch.setattr(type(MEM), "cat_file", slow_cat_file)
    shards.plan(lambda a, b: np.arange(a, b), 0, 1, [1])  # read ahead: the download starts
    assert closing.wait(60)
    shards.close()  # returns once the download stopped, after the range in flight
    assert requests == [(0, 10)]
    assert os.listdir(tmp_path / "cache" / "tmp") == []
    assert os.listdir(tmp_path / "cache" / "shards") == []


def test_two_window_shuffled_sources_on_threads_read_through_the_documented_minimum(tmp_path):
    from datarax.dataset.writer import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    pytest.importorskip("array_record")
    write_dataset([{"x": np.int32(i)} for i in range(160)], tmp_path / "ds", shards=8)
    MEM.put(str(tmp_path / "ds"), "/two-sources/ds", recursive=True)
    shard = max(p.stat().st_size for p in (tmp_path / "ds").glob("*.array_record"))
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def run(seed: int) -> None:  # docs/object-storage.md: two sources, W=2, five files
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2, seed=seed, num_epochs=4),
            "memory://two-sources/ds", cache=ShardCache(tmp_path / "cache", max_bytes=5 * shard))
        try:
            got[seed] = [int(record["x"]) for record in source]
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)
        finally:
            source.close()

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(got[1]) == sorted(got[2]) == sorted(list(range(160)) * 4)


def test_a_second_source_of_this_process_refused_room_is_told_which_and_what_to_do(tmp_path):
    # A source that holds every file it reads (no plan: any may be read again) until it is
    # closed, and a second one through the same small folder: the refusal names this
    # process's other source, not "other processes", and closing it, as the message says,
    # makes the room.
    first = _reader(tmp_path, "held-first", limit=60, behind=6, plan=False)
    assert [_read(first, i)[-1] for i in range(6)] == list(range(6))
    second = _reader(tmp_path, "held-second", limit=60, behind=6, plan=False)
    with pytest.raises(CacheFullError) as info:
        _read(second, 0)
    message = str(info.value)
    assert ("this source holds 0 bytes of files in use, and 60 bytes are held by another "
            "source in this process reading through the same folder "
            "('memory:///held-first/0.bin' and 5 more files; a source holds the files it "
            "reads until it is closed), and 0 bytes by other processes or downloads. Close "
            "the other source (source.close()) before reading this one, give each source its "
            "own folder") in message
    assert "(other processes)" not in message
    first.close()
    assert _read(second, 0) == b"h" * 5 + bytes([0]) * 5
    second.close()
