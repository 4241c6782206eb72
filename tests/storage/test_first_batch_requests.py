"""A global shuffle's first batch from an empty cache: the footers of the files it touches
are asked for together, then the chunks of its records together, and no whole-file
download starts before those ranged requests are done (they would queue behind them).
Counted, not timed."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("array_record")
pytest.importorskip("zstandard")
fsspec = pytest.importorskip("fsspec")

from int_record_files import numbered_in_memory, read_records  # noqa: E402

FILES, PER_FILE, BATCH = 24, 40, 64  # more files than the head start used to open at once
BUCKET = "/first-batch-requests"


@pytest.fixture(scope="module")
def local_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """24 files of 40 records (a 4-byte number, then 3 KB of random bytes), also in
    ``memory://first-batch-requests``."""
    folder = tmp_path_factory.mktemp("first-batch")
    with numbered_in_memory(folder, BUCKET, FILES, PER_FILE) as paths:
        yield paths


def decode(record: bytes) -> dict[str, Any]:
    return {"i": np.frombuffer(record[:4], np.int32)[0]}


def test_a_batch_over_every_file_asks_every_footer_then_every_chunk_at_once(
        local_files: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datarax.storage import RemoteShards, ShardCache, list_objects
    from datarax.storage.fetch import Fetcher
    from datarax.storage.head_start import HeadStart

    objects = list_objects(f"memory:/{BUCKET}/*.array_record")
    shards = RemoteShards(objects, cache=ShardCache(tmp_path, max_bytes="64M"), behind=FILES)
    # a request waits until all of its kind are in flight: the tails (each file's footer,
    # the request ending at the file's end), then two chunks a file; a kind asked for in
    # rounds never gathers, and its barrier breaks (the test fails, after 60 s: a loaded
    # machine may take seconds to start a pool's threads)
    tails, chunks = threading.Barrier(FILES, timeout=60), threading.Barrier(2 * FILES, timeout=60)
    broken: list[str] = []
    read_range = Fetcher.read_range

    def together(self: Any, obj: Any, start: int, end: int) -> bytes:
        barrier = tails if end == obj.size else chunks
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            broken.append("footers" if barrier is tails else "chunks")
        return read_range(self, obj, start, end)

    monkeypatch.setattr(Fetcher, "read_range", together)
    head = HeadStart(shards, request_bytes=0, budget=1 << 30)
    try:
        got = head.read({f: [30, 3] for f in range(FILES)})  # not neighbours: 2 requests a file
        assert broken == []
        local = {pathlib.Path(p).name: read_records(p) for p in local_files}
        assert got == {f: [local[o.name][30], local[o.name][3]] for f, o in enumerate(objects)}
        assert head.stats()["ranged_requests"] == 3 * FILES  # a footer and two chunks a file
        assert shards.stats()["fetched"] == 0
    finally:
        head.close()
        shards.close()


@pytest.mark.parametrize("max_requests", [30, 23])
def test_a_read_whose_requests_fit_only_once_the_footers_are_known_waits_for_them(
        max_requests: int, local_files: list[str], tmp_path: pathlib.Path) -> None:
    """Records 30 and 31 of each file are neighbouring chunks: one request a file, though
    the two records could need two. Under a cap of 30 requests (24 needed, up to 48
    possible) every footer comes first and the read goes by range; under 23 it is
    declined whole (no chunk asked for: the batch waits for the downloads)."""
    from datarax.storage import RemoteShards, ShardCache, list_objects
    from datarax.storage.head_start import HeadStart

    objects = list_objects(f"memory:/{BUCKET}/*.array_record")
    shards = RemoteShards(objects, cache=ShardCache(tmp_path, max_bytes="64M"), behind=FILES)
    head = HeadStart(shards, request_bytes=0, budget=1 << 30, max_requests=max_requests)
    try:
        got = head.read({f: [31, 30] for f in range(FILES)})
        local = {pathlib.Path(p).name: read_records(p) for p in local_files}
        if max_requests >= FILES:
            assert got == {f: [local[o.name][31], local[o.name][30]]
                           for f, o in enumerate(objects)}
            assert head.stats()["ranged_requests"] == 2 * FILES  # a footer and a chunk a file
        else:
            assert got == {}
            assert head.stats()["ranged_requests"] == FILES  # the footers only
        assert shards.stats()["fetched"] == 0
    finally:
        head.close()
        shards.close()


def test_a_global_shuffle_starts_no_download_before_its_first_batch_is_read_by_range(
        local_files: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache, array_record_ranges, head_start
    from datarax.storage.fetch import Fetcher
    from datarax.storage.read_ahead_hold import ReadAheadHold

    monkeypatch.setattr(head_start, "REQUEST_BYTES", 0)  # any read by range
    monkeypatch.setattr(head_start, "BUDGET_SHARE", 4)  # a batch of 64 in these 4.7 MB
    monkeypatch.setattr(array_record_ranges, "COUNT_MIN_SIZE", 0)  # counted from footers, not downloads
    lock = threading.Lock()
    ranged = {"in_flight": 0, "done": 0}
    at_downloads: list[tuple[int, int]] = []  # (in flight, done) as each download starts
    read_range, download = Fetcher.read_range, Fetcher.download

    def counted_range(self: Any, obj: Any, start: int, end: int) -> bytes:
        with lock:
            ranged["in_flight"] += 1
        try:
            return read_range(self, obj, start, end)
        finally:
            with lock:
                ranged["in_flight"] -= 1
                ranged["done"] += 1

    def noted_download(self: Any, obj: Any, part: str) -> None:
        with lock:
            at_downloads.append((ranged["in_flight"], ranged["done"]))
        download(self, obj, part)

    released: list[int] = []  # ranged requests done when the hold was first released
    release = ReadAheadHold.release_read_ahead

    def noted_release(self: Any) -> None:
        with lock:
            if not released:
                released.append(ranged["done"])
        release(self)

    monkeypatch.setattr(Fetcher, "read_range", counted_range)
    monkeypatch.setattr(Fetcher, "download", noted_download)
    monkeypatch.setattr(ReadAheadHold, "release_read_ahead", noted_release)
    config = ArrayRecordSourceConfig(shuffle_files=True, seed=3)
    with ArrayRecordSourceModule(config, sorted(local_files), decode=decode) as local:  # by name
        expected = [np.asarray(local.get_batch(BATCH)["i"]).tolist()
                    for _ in range(FILES * PER_FILE // BATCH)]
    with ArrayRecordSourceModule(config, f"memory:/{BUCKET}/*.array_record", decode=decode,
                                 cache=ShardCache(tmp_path, max_bytes="64M")) as remote:
        built = ranged["done"]  # the footers, read to count the records
        first = np.asarray(remote.get_batch(BATCH)["i"]).tolist()
        first_requests = remote.stats()["storage"]["ranged_requests"]
        assert first_requests >= BATCH // 2  # the first batch came by range
        rest = [np.asarray(remote.get_batch(BATCH)["i"]).tolist()
                for _ in range(FILES * PER_FILE // BATCH - 1)]
        assert [first, *rest] == expected
        assert remote.stats()["storage"]["fetched"] == FILES  # each file downloaded once
    assert len(at_downloads) == FILES
    # the hold ends when the first read returns, every one of its ranged requests done
    # (later reads may go by range beside the downloads while the budget lasts) ...
    assert released and released[0] >= built + BATCH // 2
    # ... and no download started before it
    assert all(done >= released[0] for _, done in at_downloads)



def test_files_whose_footers_outgrow_the_tail_are_opened_at_once_and_kept_after_the_read(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, s3: Any) -> None:
    """On S3 (the tails sent together, each footer decoded in one thread as its tail
    comes): a footer longer than the tail needs a second request, and each file's is in
    flight with the others' (opened in the request threads, not one after another in the
    footer thread); the footers are kept beside the cache once the read has returned."""
    from int_record_files import write_records

    from datarax.storage import RemoteShards, ShardCache, list_objects
    from datarax.storage.array_record_ranges import ArrayRecordRanges, load_footer
    from datarax.storage.fetch import Fetcher
    from datarax.storage.head_start import HeadStart

    files, per_file = 4, 9000
    folder = tmp_path / "files"
    folder.mkdir()
    for f in range(files):  # 9,000 chunks of 2 bytes: an uncompressed footer of ~72 KB
        write_records(folder / f"{f}.array_record", (bytes([f, i % 251]) for i in range(per_file)),
                      "group_size:1,uncompressed")
    objects = list_objects(s3.upload_folder(folder, "long") + "/*.array_record")
    rests = threading.Barrier(files, timeout=60)
    broken: list[str] = []
    read_range = Fetcher.read_range

    def together(self: Any, obj: Any, start: int, end: int) -> bytes:
        if end == ArrayRecordRanges.open_span(obj.size)[0]:  # the rest of a footer
            try:
                rests.wait()
            except threading.BrokenBarrierError:
                broken.append(obj.url)
        return read_range(self, obj, start, end)

    monkeypatch.setattr(Fetcher, "read_range", together)
    shards = RemoteShards(objects, cache=ShardCache(tmp_path / "cache", max_bytes="64M"),
                          behind=files)
    head = HeadStart(shards, request_bytes=0, budget=1 << 30)
    try:
        got = head.read({f: [8999, 4] for f in range(files)})
        assert broken == []
        assert got == {f: [bytes([f, 8999 % 251]), bytes([f, 4])] for f in range(files)}
        assert head.stats()["ranged_requests"] == 4 * files  # two to open, a chunk a record
        assert [load_footer(shards.cache, o) for o in objects] == [None] * files  # not yet
    finally:
        head.close()  # writes the footers kept, and waits for them
        shards.close()
    assert [load_footer(shards.cache, o).num_records for o in objects] == [per_file] * files


def _held_record(i: int) -> bytes:
    """Record ``i`` of :func:`_held_files`: ``int32(i)`` and 4000 random bytes (files of
    over two blocks: a smaller one is read whole by its tail's request)."""
    import random

    return np.int32(i).tobytes() + random.Random(i).randbytes(4000)


def _held_files(tmp_path: pathlib.Path, s3: Any, files: int = 4) -> list[Any]:
    """``files`` files of 40 numbered records (:func:`_held_record`) on S3."""
    from int_record_files import write_parts

    from datarax.storage import list_objects

    folder = tmp_path / "files"
    folder.mkdir()
    write_parts(folder, [range(f * 40, (f + 1) * 40) for f in range(files)], _held_record)
    return list_objects(s3.upload_folder(folder, "held") + "/*.array_record")


def _range_end(req: Any) -> int | None:
    """The end (exclusive) of a proxied request's ``Range`` header, or None."""
    asked = req.headers.get("Range")
    return None if asked is None else int(asked.rsplit("-", 1)[1]) + 1


def test_a_files_records_are_asked_for_before_the_last_footer_has_come(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, s3: Any) -> None:
    """On S3 a file's chunks are asked for as soon as its footer is decoded: with one
    file's tail held back by the store, the other files' records are asked for (and the
    batch is the same, a tail and a chunk a record each)."""
    from datarax.storage import RemoteShards, ShardCache
    from datarax.storage.head_start import HeadStart

    objects = _held_files(tmp_path, s3)
    sizes = {o.name: o.size for o in objects}
    held, seen = objects[0].name, threading.Event()
    log: list[tuple[str, str]] = []
    origin = s3.proxy.origin

    def holding(req: Any, body: Any) -> Any:
        name = req.path.split("?")[0].rsplit("/", 1)[-1]
        if name in sizes and _range_end(req) != sizes[name]:  # a chunk
            log.append(("chunk", name))
            seen.set()
        elif name == held:  # its tail waits until another file's chunk is asked for
            log.append(("held", name))
            log.append(("released", str(seen.wait(60))))
        return origin(req, body)

    monkeypatch.setattr(s3.proxy, "origin", holding)
    shards = RemoteShards(objects, cache=ShardCache(tmp_path / "cache", max_bytes="64M"),
                          behind=len(objects))
    head = HeadStart(shards, request_bytes=0, budget=1 << 30)
    try:
        got = head.read({f: [30, 3] for f in range(len(objects))})
        assert got == {f: [_held_record(f * 40 + i) for i in (30, 3)]
                       for f in range(len(objects))}
        assert ("released", "True") in log  # not the 60 s timeout
        released = log.index(("released", "True"))
        assert any(kind == "chunk" and name != held for kind, name in log[:released])
        assert head.stats()["ranged_requests"] == 3 * len(objects)
        assert shards.stats()["fetched"] == 0
    finally:
        head.close()
        shards.close()


@pytest.mark.parametrize("kind", ["tail", "chunk"])
def test_a_tail_or_a_chunk_that_keeps_failing_is_a_remote_store_error_naming_its_file(
        kind: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, s3: Any) -> None:
    """The tails and the chunks their footers lead to are one set under the retry policy:
    a request of either kind the store keeps refusing (503) is sent again, alone of its
    set, until the retries are used, then raises the documented ``RemoteStoreError``
    naming its file."""
    import io

    from benchmarks.counting_proxy import Answer

    from datarax.storage import RemoteShards, RemoteStoreError, RetryPolicy, ShardCache
    from datarax.storage.head_start import HeadStart

    objects = _held_files(tmp_path, s3)
    bad = objects[1]
    slow = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")
    origin = s3.proxy.origin

    def refusing(req: Any, body: Any) -> Any:
        tail = _range_end(req) == bad.size
        if req.path.split("?")[0].endswith("/" + bad.name) and tail == (kind == "tail"):
            return Answer(503, "Slow Down", [("Content-Type", "application/xml"),
                                             ("Content-Length", str(len(slow)))],
                          io.BytesIO(slow).read, lambda: None)
        return origin(req, body)

    monkeypatch.setattr(s3.proxy, "origin", refusing)
    shards = RemoteShards(objects, cache=ShardCache(tmp_path / "cache", max_bytes="64M"),
                          behind=len(objects), retry=RetryPolicy(max_retries=2, initial_delay=0))
    head = HeadStart(shards, request_bytes=0, budget=1 << 30)
    try:
        with pytest.raises(RemoteStoreError, match=rf"cannot read '{bad.url}': still failing "
                           r"after 3 attempts .*SlowDown.*DATARAX_RETRY_BUDGET"):
            head.read({f: [30, 3] for f in range(len(objects))})
        # the tail once then its 2 chunks 3 times each; or the tail 3 times, no chunk
        assert s3.proxy.count("GET", bad.name) == (7 if kind == "chunk" else 3)
        assert s3.proxy.count("GET", objects[0].name) == 3  # the others asked once
    finally:
        head.close()
        shards.close()
