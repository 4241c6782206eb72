"""Every ranged read is tied to the version of its file (listed, a dataset's shards too,
or captured at its first request): an object rewritten after the build or mid-epoch, same
size and layout, is refused, never served."""

from __future__ import annotations

import os
import pathlib
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.storage.test_block_windows import make, read, shard_paths

if TYPE_CHECKING:
    from tests.storage.conftest import S3

pytest.importorskip("array_record")

SHARDS, PER_SHARD, RECORD, NEW = 4, 100, 4096, 1_000_000  # 1.6 MB: 28 blocks of 64 KB


def _write(folder: pathlib.Path, offset: int) -> str:
    from datarax.dataset import write_dataset

    pads = np.random.default_rng(0).integers(0, 256, (SHARDS * PER_SHARD, RECORD - 4), np.uint8)
    write_dataset([{"i": np.int32(i + offset), "pad": pad} for i, pad in enumerate(pads)],
                  folder, shards=SHARDS)
    return str(folder)


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same data set twice, the second with other values of ``i``: files of the
    same sizes and the same chunk layout."""
    from datarax.storage.blocks import footers_of

    base = tmp_path_factory.mktemp("versions")
    old, new = _write(base / "old", 0), _write(base / "new", NEW)
    old_footers, new_footers = footers_of(shard_paths(old)), footers_of(shard_paths(new))
    for a, b in zip(old_footers, new_footers, strict=True):
        assert a.size == b.size and a.offsets.tolist() == b.offsets.tolist()
    return old, new


def _rewrite(s3: S3, new: str) -> None:
    for path in shard_paths(new):
        with open(path, "rb") as f:
            s3.put(f"ds/{os.path.basename(path)}", f.read())


@pytest.mark.parametrize(("mode", "before"), [("blocks", 4), ("blocks", 0), ("ranged", 1),
                                              ("ranged", 0)])
def test_an_object_rewritten_mid_epoch_is_refused_not_served(
        s3: S3, two_versions: tuple[str, str], tmp_path: pathlib.Path, mode: str,
        before: int) -> None:
    from datarax.errors import RecordError

    old, new = two_versions
    url = s3.upload_folder(old, "ds")  # with datarax_dataset.json: SHA-256 known, no ETag
    listed = {os.path.basename(p): s3.client.head_object(
        Bucket=s3.bucket, Key=f"ds/{os.path.basename(p)}")["ETag"].strip('"')
        for p in shard_paths(old)}
    total = sum(os.path.getsize(p) for p in shard_paths(old))
    config: dict[str, Any] = {} if mode == "blocks" else {
        "shuffle_window": None, "shuffle_block": None, "ranged_reads": True}
    served: list[int] = []
    with make(url, tmp_path / "c", max_bytes=total // 2, **config) as src:
        served += read(src, batches=before)  # 0: nothing read yet (blocks: the footers)
        _rewrite(s3, new)  # same sizes and layout, other values
        with pytest.raises(RecordError) as caught:  # the reader names the record too
            while True:
                got = read(src, batches=1)
                if not got:
                    break
                served += got
    assert max(served, default=0) < NEW  # nothing of the new version was served
    message = str(caught.value)
    name = str(caught.value.path).rsplit("/", 1)[-1]
    assert caught.value.path == f"{url}/{name}" and name.endswith(".array_record")
    # ranged: the versions listed when built (nothing is downloaded, no SHA-256 checked);
    # blocks: those the footers were read from when built
    when = "listed" if mode == "ranged" else "first opened"
    assert f"'{url}/{name}' changed in the store since it was {when}" in message
    now = s3.client.head_object(Bucket=s3.bucket, Key=f"ds/{name}")["ETag"].strip('"')
    assert f"found version {now!r} there" in message  # the new version ...
    assert f"its reads are tied to version {listed[name]!r}" in message  # ... the old one
    assert "rebuild the source" in message and "on_error='skip'" in message


def test_an_unchanged_object_costs_no_request_beyond_its_reads(
        s3: S3, two_versions: tuple[str, str], tmp_path: pathlib.Path) -> None:
    from tests.storage.test_block_windows import blocks_of

    old, _ = two_versions
    url = s3.upload_folder(old, "ds")
    with make(old) as local:
        expected = read(local)
    s3.proxy.reset()
    with make(url, tmp_path / "c") as src:  # a cache holding the data set: no refetch
        assert read(src) == expected
        ranged = src.stats()["storage"]["ranged_requests"]  # the head start's
    gets, heads = s3.proxy.count("GET", ".array_record"), s3.proxy.count("HEAD", ".array_record")
    # one request to open each file (its tail), one per block, the head start's ranged
    # reads: the version rides along
    assert (gets, heads) == (SHARDS + len(blocks_of(shard_paths(old))) + ranged, 0)


def test_local_and_memory_reads_are_tied_to_the_first_version_and_kept_when_pickled(
        tmp_path: pathlib.Path) -> None:
    import fsspec

    from datarax.storage import RemoteObjectError
    from datarax.storage.fetch import Fetcher
    from datarax.storage.urls import RemoteObject

    mem = fsspec.filesystem("memory")
    mem.pipe("/versions-test/a.bin", b"abcdefgh")
    obj = RemoteObject("memory://versions-test/a.bin", 8, sha256="0" * 64)  # no version
    fetcher = Fetcher()
    assert fetcher.read_range(obj, 0, 4) == b"abcd"
    first = fetcher.versions()[obj.url]
    assert first is not None
    copy = pickle.loads(pickle.dumps(fetcher))  # a worker process's fetcher
    assert copy.versions() == {obj.url: first}
    mem.pipe("/versions-test/a.bin", b"ABCDEFGH")  # same size, another version
    for reader in (fetcher, copy):
        with pytest.raises(RemoteObjectError, match=r"memory://versions-test/a.bin' changed in "
                                                    r"the store since it was first opened: a "
                                                    r"read of bytes 4-8 found version "
                                                    rf"'[^']+' there, its reads are tied to "
                                                    rf"version {first!r}"):
            reader.read_range(obj, 4, 8)
    mem.rm("/versions-test/a.bin")


def test_a_restart_ties_reads_to_the_version_its_kept_footer_was_read_from(
        tmp_path: pathlib.Path) -> None:
    import fsspec
    from array_record.python.array_record_module import ArrayRecordWriter

    from datarax.storage import RemoteObjectError, ShardCache
    from datarax.storage.array_record_ranges import ArrayRecordRanges
    from datarax.storage.fetch import Fetcher
    from datarax.storage.urls import RemoteObject

    def file_of(offset: int) -> bytes:
        path = str(tmp_path / f"f{offset}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in range(20):
            writer.write(b"%08d" % (i + offset))
        writer.close()
        return pathlib.Path(path).read_bytes()

    old, new = file_of(0), file_of(10_000_000)
    assert len(old) == len(new)
    mem = fsspec.filesystem("memory")
    mem.pipe("/versions-restart/a.array_record", old)
    obj = RemoteObject("memory://versions-restart/a.array_record", len(old), sha256="1" * 64)
    cache = ShardCache(tmp_path / "cache", max_bytes=1 << 20)
    first = Fetcher()
    assert ArrayRecordRanges.for_object(obj, fetcher=first, cache=cache).read([3]) == [b"00000003"]
    mem.pipe("/versions-restart/a.array_record", new)  # rewritten between the two runs
    again = Fetcher()  # a new process: the footer from beside the cache, no request
    reader = ArrayRecordRanges.for_object(obj, fetcher=again, cache=cache)
    assert reader.stats()["requests"] == 0 and again.versions() == first.versions()
    with pytest.raises(RemoteObjectError, match="changed in the store since it was first opened"):
        reader.read([5])
    mem.rm("/versions-restart/a.array_record")


@pytest.mark.parametrize("listable", [True, False])
def test_with_versions_gives_unversioned_objects_the_version_listed_now(
        listable: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    from datarax.storage.urls import RemoteObject, version_tag, with_versions

    mem = fsspec.filesystem("memory")
    for name in ("a", "b"):
        mem.pipe(f"/with-versions/{name}.bin", b"1234")
    calls: list[str] = []
    if not listable:  # a store refusing to list the folder (no s3:ListBucket): one info a file
        def refused(path: str, *args: Any, **kwargs: Any) -> Any:
            calls.append(path)
            raise PermissionError("Access Denied")
        monkeypatch.setattr(mem, "ls", refused)
    objects = [RemoteObject("memory://with-versions/a.bin", 4, sha256="0" * 64),
               RemoteObject("memory://with-versions/b.bin", 4, etag="kept"),
               RemoteObject("memory://with-versions/gone.bin", 4, sha256="1" * 64)]
    try:
        got = with_versions(objects)
        now = version_tag(mem.info("/with-versions/a.bin"))
    finally:
        mem.rm("/with-versions", recursive=True)
    assert now is not None
    assert [o.etag for o in got] == [now, "kept", None]  # a missing file: named at its read
    assert [(o.url, o.sha256) for o in got] == [(o.url, o.sha256) for o in objects]
    assert len(calls) == (0 if listable else 1)
