"""A head start: the first batches of remote ArrayRecord files come from ranged reads while
the files download whole, and are the batches the local files give."""

from __future__ import annotations

import pathlib
import random
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

pytest.importorskip("array_record")
pytest.importorskip("zstandard")

from int_record_files import write_parts, write_records  # noqa: E402

if TYPE_CHECKING:
    from tests.storage.conftest import S3

SHARDS, PER_SHARD, BATCH = 4, 400, 64


@pytest.fixture(scope="module")
def local_files(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """4 files of 400 records (a 4-byte number, then 3 KB of random bytes): 1.2 MB each."""
    folder = tmp_path_factory.mktemp("head")
    rng = random.Random(0)
    write_parts(folder, [range(f * PER_SHARD, (f + 1) * PER_SHARD) for f in range(SHARDS)],
                lambda i: np.int32(i).tobytes() + rng.randbytes(3072))
    return folder


def decode(record: bytes) -> dict[str, Any]:
    return {"i": np.frombuffer(record[:4], np.int32)[0],
            "tail": np.frombuffer(record[4:12], np.uint8)}


def source(paths: Any, cache_dir: pathlib.Path | None = None, **config: Any) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    kwargs: dict[str, Any] = {}
    if cache_dir is not None:
        kwargs["cache"] = ShardCache(cache_dir, max_bytes="64M")
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, decode=decode,
                                   **kwargs)


def batches(src: Any, count: int | None = None) -> list[tuple[list[int], list[list[int]]]]:
    out = []
    while count is None or len(out) < count:
        batch = src.get_batch(BATCH)
        if batch is None:
            break
        out.append((np.asarray(batch["i"]).tolist(), np.asarray(batch["tail"]).tolist()))
    return out


def local_paths(folder: pathlib.Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.array_record"))


def block_count(folder: pathlib.Path) -> int:
    """Blocks of BLOCKS's size in the files of ``folder`` (5 a file of 1.2 MB)."""
    from datarax.storage.blocks import FileBlocks, footers_of

    return len(FileBlocks.cut(footers_of(local_paths(folder)), 256 << 10))


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Whole-file downloads wait until the event is set (ranged reads do not); reads go by
    range whatever the bytes they spare (by default 1 MiB a request), 1/16 of the bytes."""
    from datarax.storage import head_start
    from datarax.storage.fetch import Fetcher

    monkeypatch.setattr(head_start, "REQUEST_BYTES", 0)  # any read by range
    monkeypatch.setattr(head_start, "BUDGET_SHARE", 16)  # a batch of 64 in these 4.9 MB

    go = threading.Event()
    download = Fetcher.download

    def waiting(self: Any, obj: Any, part: str) -> None:
        assert go.wait(60), "the test never let the downloads go"
        download(self, obj, part)

    monkeypatch.setattr(Fetcher, "download", waiting)
    return go


BLOCKS = {"shuffle_files": True, "seed": 7, "shuffle_window": 2, "shuffle_block": "256K"}


@pytest.mark.parametrize("config", [{"shuffle_files": True, "seed": 3},
                                    {"shuffle_files": True, "seed": 5, "shuffle_window": 2},
                                    BLOCKS])
def test_first_batches_by_range_then_cached_are_the_local_batches(
        s3: S3, local_files: pathlib.Path, tmp_path: pathlib.Path, config: dict[str, Any],
        stalled: threading.Event) -> None:
    with source(local_paths(local_files), **config) as local:
        expected = [batches(local)]
        local.seek(1)
        expected.append(batches(local))
    url = s3.upload_folder(local_files, "ds")
    names = [f"part-{f}.array_record" for f in range(SHARDS)]
    with source(url + "/*.array_record", tmp_path / "cache", **config) as remote:
        built = sum(s3.proxy.count("GET", n) for n in names)  # the footers, for the counts
        assert built <= 2 * SHARDS
        first = batches(remote, 1)  # while no whole file can download
        storage = remote.stats()["storage"]
        assert storage["fetched"] == 0 and storage["ranged_records"] >= BATCH
        stalled.set()
        assert first + batches(remote) == expected[0]
        storage = remote.stats()["storage"]
        # each file (or block) downloaded whole, once (one GET)
        units = SHARDS if "shuffle_block" not in config else block_count(local_files)
        assert storage["fetched"] == units
        # every other request since the build was a ranged read, counted exactly
        gets = sum(s3.proxy.count("GET", n) for n in names)
        assert gets - built - units == storage["ranged_requests"] > 0
        ranged = storage["ranged_records"]
        remote.seek(1)
        assert batches(remote) == expected[1]
        after = remote.stats()["storage"]
        # the files are in the cache now: no ranged read, no request
        assert after["ranged_records"] == ranged
        assert sum(s3.proxy.count("GET", f"part-{f}.array_record") for f in range(SHARDS)) == gets


@pytest.mark.parametrize("config", [{"shuffle_files": True, "seed": 11}, BLOCKS])
def test_a_restore_into_a_new_source_with_an_empty_cache_is_exact(
        s3: S3, local_files: pathlib.Path, tmp_path: pathlib.Path,
        stalled: threading.Event, config: dict[str, Any]) -> None:
    with source(local_paths(local_files), **config) as local:
        batches(local, 7)
        state = local.get_state()
        rest = batches(local)
    url = s3.upload_folder(local_files, "ds")
    with source(url + "/*.array_record", tmp_path / "cache", **config) as remote:
        remote.set_state(state)
        first = batches(remote, 1)
        assert remote.stats()["storage"]["ranged_records"] >= BATCH
        assert remote.stats()["storage"]["fetched"] == 0
        stalled.set()
        assert first + batches(remote) == rest


def test_files_ranged_reads_cannot_decode_are_read_whole(tmp_path: pathlib.Path) -> None:
    import fsspec

    from datarax.storage import ShardCache, list_objects
    from datarax.storage.array_record_ranges import load_footer
    from datarax.storage.head_start import HeadStart
    from datarax.storage.shards import RemoteShards

    fs = fsspec.filesystem("memory")
    rng = random.Random(1)
    for name, options in (("plain", "group_size:1"), ("transposed", "group_size:1,transpose")):
        path = tmp_path / f"{name}.array_record"
        write_records(path, (bytes([i]) + rng.randbytes(300) for i in range(10)), options)
        fs.pipe(f"/head-test/{name}.array_record", path.read_bytes())
    objects = list_objects(["memory://head-test/plain.array_record",
                            "memory://head-test/transposed.array_record"])
    shards = RemoteShards(objects, cache=ShardCache(tmp_path / "cache", max_bytes="1M"))
    try:
        head = HeadStart(shards, request_bytes=0, budget=1 << 30)
        got = head.read({0: [9, 2], 1: [3]})
        assert list(got) == [0] and [r[0] for r in got[0]] == [9, 2]
        assert head.read({1: [3]}) == {}  # refused once, left to the whole file after
        assert head.read({0: [1]})[0][0][0] == 1
        head.close()  # waits for the footers kept beside the cache in the background
        footer = load_footer(shards.cache, objects[0])  # kept by the first reads
        assert footer is not None
        one = footer.end(1) - int(footer.offsets[1])  # the bytes of record 1's chunk
        skimpy = HeadStart(shards, request_bytes=0, budget=one)
        assert skimpy.read({0: [1, 2]}) == {}  # two chunks do not fit the budget
        assert skimpy.read({0: [1]}) == {}  # declined once: the rest wait until the next arm
        skimpy.arm()
        assert skimpy.read({0: [1]})[0][0][0] == 1  # one chunk fits, and spends it
        assert skimpy.stats()["ranged_budget_left"] == 0
        assert skimpy.read({0: [1]}) == {}  # spent: left to the downloads
        skimpy.arm()  # a new epoch
        assert skimpy.read({0: [1]})[0][0][0] == 1
        spare = HeadStart(shards)  # a request must spare 1 MiB of download by default
        assert spare.read({0: [1]}) == {}
        # one request sparing the whole file's download: worth it up to the file's size
        size = objects[0].size
        assert HeadStart(shards, request_bytes=size).read({0: [1]})[0][0][0] == 1
        assert HeadStart(shards, request_bytes=size + 1).read({0: [1]}) == {}
    finally:
        shards.close()


def test_a_file_deleted_mid_epoch_is_named_then_left_to_the_whole_file(tmp_path: pathlib.Path) -> None:
    import fsspec

    from datarax.storage import RemoteObjectError, ShardCache, list_objects
    from datarax.storage.head_start import HeadStart
    from datarax.storage.shards import RemoteShards

    fs = fsspec.filesystem("memory")
    path = tmp_path / "a.array_record"
    # over two blocks: larger than the tail's request (a file read whole by it needs no more)
    write_records(path, (bytes([i % 251]) * 100 for i in range(3000)))
    fs.pipe("/head-gone/a.array_record", path.read_bytes())
    shards = RemoteShards(list_objects("memory://head-gone/a.array_record"),
                          cache=ShardCache(tmp_path / "cache", max_bytes="1M"))
    try:
        head = HeadStart(shards, request_bytes=0, budget=1 << 30)
        assert head.read({0: [4]}) == {0: [bytes([4]) * 100]}
        fs.rm("/head-gone/a.array_record")
        with pytest.raises(RemoteObjectError, match="memory://head-gone/a.array_record.*deleted"):
            head.read({0: [5]})
        assert head.read({0: [5]}) == {}  # the whole-file path reports it from now on
    finally:
        shards.close()


def test_a_file_deleted_mid_epoch_is_named_by_the_whole_file_path_in_a_full_cache(
        tmp_path: pathlib.Path) -> None:
    # ranged_reads=True with a cache of about one file, that file held: the file found
    # deleted by a ranged read is named again by the whole-file path, not refused room
    # (a CacheFullError before: the cache reserved its room before asking the store)
    import re

    import fsspec

    from datarax.storage import RemoteObjectError, ShardCache, list_objects
    from datarax.storage.head_start import UNBOUNDED, HeadStart
    from datarax.storage.shards import RemoteShards

    fs = fsspec.filesystem("memory")
    for name in ("a", "b"):
        path = tmp_path / f"{name}.array_record"
        write_records(path, (bytes([i]) * 1000 for i in range(20)))
        fs.pipe(f"/head-gone-full/{name}.array_record", path.read_bytes())
    objects = list_objects("memory://head-gone-full/*.array_record")
    shards = RemoteShards(objects, cache=ShardCache(tmp_path / "cache", max_bytes=int(
        objects[0].size * 1.5)), behind=0)
    try:
        held = shards.local_path(0)  # a cached copy read whole: held, the cache is full
        head = HeadStart(shards, request_bytes=0, budget=UNBOUNDED, max_requests=UNBOUNDED)
        fs.rm("/head-gone-full/b.array_record")
        gone = re.escape(f"'{objects[1].url}' was deleted from the store")
        with pytest.raises(RemoteObjectError, match=gone):
            head.read({1: [3]})
        assert head.read({1: [4]}) == {}  # left to the whole-file path ...
        for _ in range(2):  # ... which names it every time, asking the cache no room
            with pytest.raises(RemoteObjectError, match=gone):
                shards.local_path(1)
        assert list(shards.failed()) == [objects[1].url]
        assert shards.local_path(0) == held  # the other file still read
    finally:
        shards.close()
        fs.rm("/head-gone-full", recursive=True)
