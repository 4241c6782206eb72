"""Block windows (``shuffle_block``): files cut into blocks of whole chunks from their
footers, shuffled within windows of W blocks; remote blocks downloaded one at a time, each
host only the blocks of its share."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from datarax.core.errors import ConfigError, StateError
from datarax.core.share import Share
from datarax.samplers.shard_window import ShardWindows

if TYPE_CHECKING:
    from tests.storage.conftest import S3

pytest.importorskip("array_record")

SHARDS, PER_SHARD, RECORD = 8, 250, 4096  # 8 MB of 4 KB records
SMALL_SHARD, SMALL_RECORD = 25, 16384  # small_dataset: 3.2 MB, one request a record
BLOCK, WINDOW = "64K", 4  # the smallest block: ~15 records, 16 blocks a shard


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    from datarax.dataset import write_dataset

    folder = tmp_path_factory.mktemp("blocks") / "ds"
    pads = np.random.default_rng(0).integers(0, 256, (SHARDS * PER_SHARD, RECORD - 4), np.uint8)
    write_dataset([{"i": np.int32(i), "pad": pad} for i, pad in enumerate(pads)],
                  folder, shards=SHARDS)  # incompressible: ~1 MB a shard
    return str(folder)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """SHARDS shards of SMALL_SHARD records of 16 KB: for reads of one request a record."""
    from datarax.dataset import write_dataset

    folder = tmp_path_factory.mktemp("small") / "ds"
    pads = np.random.default_rng(1).integers(0, 256, (SHARDS * SMALL_SHARD, SMALL_RECORD - 4),
                                             np.uint8)
    write_dataset([{"i": np.int32(i), "pad": pad} for i, pad in enumerate(pads)],
                  folder, shards=SHARDS)
    return str(folder)


def shard_paths(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if n.endswith(".array_record"))


def make(paths: Any, cache: pathlib.Path | None = None, max_bytes: int | str = "64M",
         ranged_reads: bool = False, **config: Any) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    kwargs: dict[str, Any] = {"ranged_reads": True} if ranged_reads else {}
    if cache is not None:
        kwargs["cache"] = ShardCache(cache, max_bytes=max_bytes)
    settings = {"shuffle_files": True, "shuffle_window": WINDOW, "shuffle_block": BLOCK,
                "seed": 5, **config}
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**settings), paths, **kwargs)


def read(src: Any, batches: int | None = None, size: int = 16) -> list[int]:
    # small batches: the reader threads' chunks (64 positions) stay within a window or two
    # of ~60 records (at scale a block alone holds thousands)
    out: list[int] = []
    while batches is None or batches > 0:
        batch, indices = src.get_batch_with_indices(size)
        if batch is None:
            break
        ids = np.asarray(batch["i"]).tolist()
        assert ids == np.asarray(indices).tolist()  # per-record keys: the global index
        out += ids
        batches = None if batches is None else batches - 1
    return out


def blocks_of(paths: list[str], block: int | str | None = BLOCK) -> Any:
    from datarax.storage import parse_bytes
    from datarax.storage.blocks import FileBlocks, footers_of

    return FileBlocks.cut(footers_of(paths), None if block is None else parse_bytes(block))


# ------------------------------------------------------------------- the cut
@pytest.mark.parametrize("group", [1, 7, 64])
def test_blocks_are_whole_chunks_of_about_the_size_asked(tmp_path: pathlib.Path, group: int) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    from datarax.storage.blocks import BlockRecords

    path = str(tmp_path / "g.array_record")
    writer = ArrayRecordWriter(path, f"group_size:{group},uncompressed")
    records = [bytes([i % 251]) * (500 + 37 * (i % 50)) for i in range(3000)]
    for r in records:
        writer.write(r)
    writer.close()
    blocks = blocks_of([path], 200_000)
    footer = blocks.footers[0]
    assert sum(blocks.counts) == 3000 and len(blocks) == -(-footer.footer_offset // 200_000)
    sizes = blocks.sizes()
    assert sum(sizes) == footer.footer_offset - int(footer.offsets[0])  # every chunk once
    assert max(sizes) < 200_000 + 64 * 2500  # within a chunk of the even cut
    starts = [blocks.byte_range(b)[0] for b in range(len(blocks))]
    assert set(starts) <= set(footer.offsets.tolist())  # cut at chunk starts
    firsts = np.concatenate([[0], blocks.ends])
    for b in (0, len(blocks) // 2, len(blocks) - 1):
        start, end = blocks.byte_range(b)
        (tmp_path / "shards").mkdir(exist_ok=True)
        copy = tmp_path / "shards" / f"block{b}"  # as in a cache folder: sparse/ beside it
        with open(path, "rb") as f:
            f.seek(start)
            copy.write_bytes(f.read(end - start))
        tail = tmp_path / "tail"
        with open(path, "rb") as f:
            f.seek(footer.footer_offset)
            tail.write_bytes(f.read())
        wanted = list(range(int(firsts[b]), int(firsts[b + 1])))[::-1]
        # decoded here, and by array_record's reader from a sparse copy (block + tail)
        for reader in (BlockRecords(str(copy), start, footer, name=path),
                       BlockRecords(str(copy), start, footer, name=path, tail=str(tail))):
            assert reader.read(wanted) == [records[i] for i in wanted]
            reader.close()
        assert os.listdir(tmp_path / "sparse") == []  # the copy's disk freed once opened
    assert blocks_of([path], None).counts == (3000,)  # block = file


def test_config_refuses_a_block_without_a_window_or_too_small() -> None:
    from datarax.sources import ArrayRecordSourceConfig

    with pytest.raises(ConfigError, match="needs shuffle_window=W"):
        ArrayRecordSourceConfig(shuffle_files=True, shuffle_block="8M")
    with pytest.raises(ConfigError, match="smaller than 65536 bytes"):
        ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2, shuffle_block=1000)
    with pytest.raises(ConfigError, match="not a size in bytes"):
        ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2, shuffle_block="eight")


# ------------------------------------------------------------- local order
def test_each_record_once_a_window_of_w_blocks_and_the_order_a_pure_function(
        local_dataset: str) -> None:
    blocks = blocks_of(shard_paths(local_dataset))
    assert len(blocks) >= 100  # ~1 MB shards in 64 KB blocks
    n = SHARDS * PER_SHARD
    with make(local_dataset) as src:
        epoch0 = read(src)
        src.seek(1)
        epoch1 = read(src)
        state = src.get_state()
    assert sorted(epoch0) == list(range(n)) and sorted(epoch1) == list(range(n))
    assert epoch0 != epoch1
    expected = ShardWindows(blocks.counts, WINDOW, seed=5).indices(np.arange(n)).tolist()
    assert epoch0 == expected  # the file-window shuffle over blocks
    windows = ShardWindows(blocks.counts, WINDOW, seed=5)
    for w in range(windows.num_windows):
        lo, hi = windows.window_bounds[w], windows.window_bounds[w + 1]
        assert len(set(blocks.block_of(np.asarray(epoch0[lo:hi])).tolist())) <= WINDOW
    assert state["shuffled_indices"] == {"seed": 5, "epoch": 1, "n": n, "window": WINDOW,
                                         "block": 64 << 10}
    # the same order in another process
    code = ("import json, sys, numpy as np\n"
            "from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule\n"
            "src = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=5, shuffle_files=True, "
            f"shuffle_window={WINDOW}, shuffle_block='{BLOCK}'), sys.argv[1])\n"
            "print(json.dumps(src.epoch_order(1).indices(0, len(src)).tolist()))\n")
    out = subprocess.run([sys.executable, "-c", code, local_dataset], capture_output=True,
                         text=True, check=True, env={**os.environ})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == epoch1


def test_a_state_of_another_block_size_is_refused(local_dataset: str) -> None:
    with make(local_dataset) as src:
        state = src.get_state()
    with make(local_dataset, shuffle_block="128K") as other:
        with pytest.raises(StateError, match="shuffle_block=65536 but this source has "
                                             "shuffle_block=131072"):
            other.set_state(state)
    with make(local_dataset, shuffle_block=None) as files:
        with pytest.raises(StateError, match="shuffle_block"):
            files.set_state(state)


def test_a_state_restores_under_the_same_block_size_written_another_way(local_dataset: str) -> None:
    with make(local_dataset) as src:  # shuffle_block="64K"
        first = read(src, 2)
        state = src.get_state()
        rest = read(src, 2)
    assert src.config.shuffle_block == 65536 and state["settings"]["shuffle_block"] == 65536
    with make(local_dataset, shuffle_block=65536) as same:
        same.set_state(state)
        assert read(same, 2) == rest
    older = {**state, "settings": {**state["settings"], "shuffle_block": "64K"}}
    with make(local_dataset, shuffle_block=np.int64(65536)) as same:  # a state saved before
        same.set_state(older)
        assert read(same, 2) == rest
    assert len(first) == 32 and not set(first) & set(rest)


# ------------------------------------------------------------------ remote
@pytest.fixture(scope="module")
def expected(local_dataset: str) -> list[int]:
    """Epoch 0 of the local files: what every remote read of them must serve."""
    with make(local_dataset) as local:
        return read(local)


@pytest.fixture(scope="module")
def remote_dataset(s3_server: str, s3_proxy: Any, local_dataset: str) -> str:
    """``local_dataset`` uploaded once to its own bucket (read through the proxy by each
    test's ``s3`` environment)."""
    from tests.storage.conftest import S3

    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = f"datarax-blocks-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    return S3(bucket, s3_proxy, s3_server, client).upload_folder(local_dataset, "ds")


def most_sent(paths: list[str], runs: Any) -> int:
    """Bytes a read of ``runs`` (of the epoch order) may download: the blocks of the windows
    the runs touch, each once, and each file's footer read (its tail and 128 KB before)."""
    blocks = blocks_of(paths)
    windows = ShardWindows(blocks.counts, WINDOW, seed=5)
    needed = set()
    for lo, hi in runs:
        for w in range(int(windows.window_of(np.asarray([lo]))[0]),
                       int(windows.window_of(np.asarray([hi - 1]))[0]) + 1):
            needed |= set(windows.window_shards(w))
    sizes = blocks.sizes()
    footers = sum(os.path.getsize(p) - f.footer_offset + (128 << 10)
                  for p, f in zip(paths, blocks.footers, strict=True))
    return sum(sizes[b] for b in needed) + footers


def test_a_remote_epoch_downloads_blocks_with_a_cache_smaller_than_a_file_and_resumes_mid_window(
        s3: S3, local_dataset: str, remote_dataset: str, expected: list[int],
        tmp_path: pathlib.Path) -> None:
    paths = shard_paths(local_dataset)
    cache = int(max(os.path.getsize(p) for p in paths) * 0.8)  # < one file, > two windows
    blocks = blocks_of(paths)
    s3.proxy.reset()
    with make(remote_dataset, tmp_path / "c0", max_bytes=cache) as src:
        head = read(src, batches=110)  # 1,760 of 2,000 records
        state = src.get_state()
        assert head + read(src) == expected
        stats = src.stats()["storage"]
    bounds = ShardWindows(blocks.counts, WINDOW, seed=5).window_bounds.tolist()
    assert len(head) not in bounds  # saved mid-window
    sent = s3.proxy.sent(".array_record")
    # each block once (evicted ones not again)
    assert sent <= most_sent(paths, [(0, len(expected))]), sent
    assert stats["fetched"] >= len(blocks)
    with make(remote_dataset, tmp_path / "c1", max_bytes=cache) as again:  # an empty cache
        again.set_state(state)
        assert head + read(again) == expected


def test_each_host_downloads_its_share_only(s3: S3, local_dataset: str, remote_dataset: str,
                                            expected: list[int],
                                            tmp_path: pathlib.Path) -> None:
    paths = shard_paths(local_dataset)
    total = sum(os.path.getsize(p) for p in paths)
    half = len(expected) // 2
    served, sent = [], []
    for host in range(2):
        s3.proxy.reset()
        with make(remote_dataset, tmp_path / f"host{host}", max_bytes=total // 4) as src:
            src.set_shard(host, 2)
            served.append(read(src))
        sent.append(s3.proxy.sent(".array_record"))
    assert served == [expected[:half], expected[half:]]  # contiguous runs of the epoch order
    for host, got in enumerate(sent):  # its windows' blocks (the middle one on both)
        assert got <= most_sent(paths, [(host * half, (host + 1) * half)]), (sent, total)
        assert got < 0.75 * total, (sent, total)  # far from all of the files


def test_a_cache_too_small_for_a_global_shuffle_names_block_windows_and_ranged_reads(
        s3: S3, local_dataset: str, remote_dataset: str, tmp_path: pathlib.Path) -> None:
    from datarax.storage import CacheFullError

    url = remote_dataset
    total = sum(os.path.getsize(p) for p in shard_paths(local_dataset))
    with pytest.raises(CacheFullError) as caught:
        make(url, tmp_path / "c", max_bytes=total // 4, shuffle_window=None, shuffle_block=None)
    message = str(caught.value)
    assert "shuffle_block='8M'" in message and "about two windows" in message
    assert ("ArrayRecordSourceModule(..., ranged_reads=True) reads each record by byte range, "
            "about 2,000 requests an epoch (one a record, all hosts together; 8 files, "
            f"{total:,} bytes)") in message
    with pytest.raises(ConfigError, match="ranged_reads=True reads single records and "
                                          "shuffle_block downloads blocks of them"):
        make(url, tmp_path / "c", ranged_reads=True)


def test_ranged_reads_serve_a_global_shuffle_from_a_small_cache_each_host_its_records(
        s3: S3, small_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(small_dataset, "small")
    total = sum(os.path.getsize(p) for p in shard_paths(small_dataset))
    n = SHARDS * SMALL_SHARD
    with make(small_dataset, shuffle_window=None, shuffle_block=None) as local:
        expected = read(local, size=64)
    served, sent, requests = [], [], []
    for host in range(2):
        s3.proxy.reset()
        with make(url, tmp_path / f"host{host}", max_bytes=total // 4, shuffle_window=None,
                  shuffle_block=None, ranged_reads=True) as src:
            src.set_shard(host, 2)
            served.append(read(src, size=64))
            stats = src.stats()["storage"]
        assert stats["fetched"] == 0  # no file downloaded
        sent.append(s3.proxy.sent(".array_record"))
        requests.append(sum(c for (m, p), c in s3.proxy.requests.items()
                            if p.endswith(".array_record")))
    assert served == [expected[: n // 2], expected[n // 2:]]
    for got, count in zip(sent, requests, strict=True):
        # the host's records (a chunk each) and the 8 footers, nothing else
        assert got <= 1.1 * total / 2 + SHARDS * (128 << 10), (sent, total)
        assert n // 2 * 0.5 <= count <= n // 2 + 2 * SHARDS, requests


def test_an_elastic_share_of_runs_downloads_the_blocks_of_its_runs(
        s3: S3, local_dataset: str, remote_dataset: str, expected: list[int],
        tmp_path: pathlib.Path) -> None:
    paths = shard_paths(local_dataset)
    total = sum(os.path.getsize(p) for p in paths)
    # 2 processes saved at 600 of their 1000; restored on one, it serves both rests
    share = Share(0, 1, epoch=0, history=((2, 600),))
    runs = share.runs(SHARDS * PER_SHARD)
    assert runs == ((600, 1000), (1600, 2000))
    s3.proxy.reset()
    with make(remote_dataset, tmp_path / "c", max_bytes=total // 4) as src:
        src.use_share(share)
        assert read(src) == expected[600:1000] + expected[1600:2000]
    assert s3.proxy.sent(".array_record") <= most_sent(paths, runs)


def test_a_damaged_footer_is_refused_at_build_naming_its_shard(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    from datarax.errors import RecordError

    url = s3.upload_folder(local_dataset, "damaged")
    shard = shard_paths(local_dataset)[2]
    data = bytearray(pathlib.Path(shard).read_bytes())
    data[-(64 << 10):] = bytes(64 << 10)  # the postscript gone (same size, as listed)
    key = f"damaged/{os.path.basename(shard)}"
    s3.put(key, bytes(data))
    with pytest.raises(RecordError, match=os.path.basename(shard)) as info:
        make(url, tmp_path / "c")
    assert "(its postscript)" in str(info.value)
    assert "the file is damaged or not an ArrayRecord file" in str(info.value)


def test_a_cache_too_small_for_a_window_of_blocks_names_blocks_not_files(
        s3: S3, remote_dataset: str, tmp_path: pathlib.Path) -> None:
    from datarax.storage import CacheFullError

    with pytest.raises(CacheFullError) as caught:
        make(remote_dataset, tmp_path / "c", max_bytes=100_000)
    message = str(caught.value)
    assert (f"cannot hold the {WINDOW} blocks a reader uses at once (a window of {WINDOW} "
            "blocks)") in message
    assert message.endswith("or read fewer blocks at once (a smaller shuffle_window or "
                            "shuffle_block).")  # not the shuffle_block='8M' it was given
