"""Reading datasets from a real S3 server (moto, behind a fault-injecting proxy) the way a
user does: ``s3fs`` with the standard ``AWS_*`` environment."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from datarax.core.errors import RecordError

if TYPE_CHECKING:
    from tests.storage.conftest import S3


def test_the_local_server_serves_through_the_proxy_with_faults(s3: S3) -> None:
    import boto3
    import botocore.config
    import s3fs

    data = bytes(range(256)) * 40
    s3.put("probe/a.bin", data)
    fs = s3fs.S3FileSystem()  # endpoint and credentials from the environment
    assert fs.ls(s3.url("probe")) == [f"{s3.bucket}/probe/a.bin"]
    once = boto3.client("s3", config=botocore.config.Config(retries={"total_max_attempts": 1}))
    s3.proxy.throttle("probe/a.bin", 1)
    with pytest.raises(Exception, match="SlowDown"):
        once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read()
    assert once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read() == data
    s3.proxy.reset_mid_body("probe/a.bin")
    with pytest.raises(Exception, match="(?i)connection|incomplete|read"):
        once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read()
    assert fs.cat(s3.url("probe/a.bin")) == data
    assert s3.proxy.count("GET", "probe/a.bin") == 4


# --------------------------------------------------------------- datasets on S3
SHARDS, PER_SHARD = 6, 20


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("array_record")
    from datarax.dataset import write_dataset

    folder = tmp_path_factory.mktemp("s3data") / "ds"
    n = SHARDS * PER_SHARD
    records = [{"i": np.int32(i), "v": np.full(3, i, np.float32)} for i in range(n)]
    write_dataset(records, folder, shards=SHARDS)
    return str(folder)


def shard_names(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".array_record"))


def source(paths: str, tmp_path: pathlib.Path | None = None, max_bytes: int | str = "64M",
           **config: Any) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    kwargs: dict[str, Any] = {}
    if tmp_path is not None:
        kwargs["cache"] = ShardCache(tmp_path / "cache", max_bytes=max_bytes)
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, **kwargs)


def read(src: Any, batches: int | None = None, size: int = 16) -> list[int]:
    out: list[int] = []
    while batches is None or batches > 0:
        batch = src.get_batch(size)
        if batch is None:
            break
        assert (np.asarray(batch["v"])[:, 0] == np.asarray(batch["i"])).all()
        out += np.asarray(batch["i"]).tolist()
        batches = None if batches is None else batches - 1
    return out


def test_an_s3_dataset_reads_like_the_local_one_and_is_cached(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    s3.proxy.latency = 0.05
    with source(local_dataset, shuffle_files=True, seed=1) as local:
        expected = read(local)
    with source(url, tmp_path, shuffle_files=True, seed=1) as remote:
        assert read(remote) == expected
        stats = remote.stats()["storage"]
        assert stats["fetched"] == SHARDS and stats["retries"] == 0
    gets = sum(s3.proxy.count("GET", name) for name in shard_names(local_dataset))
    with source(url, tmp_path, shuffle_files=True, seed=1) as again:  # a restart: cached
        assert read(again) == expected
        assert again.stats()["storage"]["fetched"] == 0
        assert again.stats()["storage"]["cache_hits"] >= SHARDS
    assert sum(s3.proxy.count("GET", name) for name in shard_names(local_dataset)) == gets


def test_a_dataset_is_opened_with_one_request_and_never_listed_again(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    metadata = f"/{s3.bucket}/ds/datarax_dataset.json"
    s3.proxy.reset()
    with source(url, tmp_path, shuffle_files=True, seed=4) as src:
        assert dict(s3.proxy.requests) == {("GET", metadata): 1}  # no HEAD, no listing
        for epoch in range(3):
            src.seek(epoch)
            assert sorted(read(src)) == list(range(SHARDS * PER_SHARD))
    shards = {f"/{s3.bucket}/ds/{name}" for name in shard_names(local_dataset)}
    assert {path for _, path in s3.proxy.requests} == shards | {metadata}
    assert s3.proxy.requests[("GET", metadata)] == 1
    assert all(s3.proxy.requests[("GET", path)] == 1 for path in shards)  # once, then cached


def test_a_list_of_urls_is_listed_in_its_order_and_a_missing_one_named(
        s3: S3, local_dataset: str) -> None:
    from datarax.storage import list_objects

    url = s3.upload_folder(local_dataset, "ds")
    names = shard_names(local_dataset)[::-1]
    s3.proxy.latency = 0.05
    objects = list_objects([f"{url}/{name}" for name in names])
    assert [o.name for o in objects] == names
    assert [o.size for o in objects] == [os.path.getsize(os.path.join(local_dataset, n)) for n in names]
    assert all(s3.proxy.count("HEAD", name) == 1 for name in names)
    urls = [f"{url}/{names[0]}", f"{url}/gone-1.array_record", f"{url}/gone-2.array_record"]
    with pytest.raises(RecordError, match="gone-1.array_record' does not exist"):
        list_objects(urls)


def test_a_glob_in_a_missing_bucket_is_named_as_matching_nothing(s3: S3) -> None:
    from datarax.storage import list_objects

    pattern = f"s3://{s3.bucket}-missing/ds/data-*.array_record"
    with pytest.raises(RecordError, match=rf"the glob pattern '{re.escape(pattern)}' matches no files: .*"
                       r"bucket does not exist \(FileNotFoundError\); check the bucket") as info:
        list_objects(pattern)
    assert info.value.path == pattern


@pytest.mark.parametrize("first", ["local", "url"])
def test_a_list_mixing_local_files_and_urls_is_refused_by_name(local_dataset: str, first: str) -> None:
    from datarax.core.errors import ConfigError

    local = os.path.join(local_dataset, shard_names(local_dataset)[0])
    url = "s3://some-bucket/ds/data-00001-of-00006.array_record"
    paths = [local, url] if first == "local" else [url, local]
    with pytest.raises(ConfigError, match=r"paths mixes (local paths and URLs|remote URLs and the "
                                          r"local path).*give one kind"):
        source(paths)  # type: ignore[arg-type]


def test_missing_credentials_or_a_store_down_when_the_source_is_built_name_the_url(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import s3fs

    from datarax.storage import RemoteStoreError, RetryPolicy, list_objects

    url = s3.upload_folder(local_dataset, "ds")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    for paths in (url, f"{url}/data-*.array_record"):  # the metadata's request, a listing
        with pytest.raises(RemoteStoreError, match=r"cannot read 's3://.*': access refused "
                           r"\(NoCredentialsError.*Check the credentials") as info:
            source(paths, tmp_path)
        assert info.value.url.startswith(url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    closed = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", closed)
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(RemoteStoreError, match=r"cannot read 's3://.*/ds/data-00000-of-00006.array_record'"
                       r": still failing after 2 attempts in .* s .*The store is down.*DATARAX_RETRY_BUDGET"):
        list_objects(f"{url}/data-00000-of-00006.array_record",
                     retry=RetryPolicy(max_retries=1, initial_delay=0.0))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cli_inspect_and_scan_decode_a_dataset_in_a_bucket_as_a_local_one(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from datarax.cli.main import main

    url = s3.upload_folder(local_dataset, "ds")
    monkeypatch.setenv("DATARAX_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["inspect", url, "--json", "--records", "2"]) == 0  # decoded, as a local folder
    report = json.loads(capsys.readouterr().out)
    assert report["element_spec"] == {"i": "int32 ()", "v": "float32 (3,)"}
    assert report["first_records"] == [{"i": "int32 0", "v": "float32 (3,) min 0.0 max 0.0"},
                                       {"i": "int32 1", "v": "float32 (3,) min 1.0 max 1.0"}]
    assert report["metadata"]["records"] == SHARDS * PER_SHARD
    assert main(["scan", url]) == 0
    assert f"{SHARDS * PER_SHARD} good, 0 bad" in capsys.readouterr().out


def test_read_metadata_of_a_bucket_dataset_gives_the_decode_recipe_its_features(
        s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.core.errors import DataraxError
    from datarax.dataset import Features, Field, decode_records, read_metadata, write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    # docs/data-in.md's decode= recipe for a field of variable shape, on a bucket
    feats = Features((Field("tokens", "int32", (None,), "varlen"), Field("label", "int64", (), "raw")))
    records = [{"tokens": np.arange(i % 5 + 1, dtype=np.int32), "label": i} for i in range(8)]
    write_dataset(records, tmp_path / "tokens_ds", features=feats, shards=2)
    url = s3.upload_folder(tmp_path / "tokens_ds", "tokens_ds")
    features = read_metadata(url).features
    assert features == read_metadata(tmp_path / "tokens_ds").features

    def decode(record: bytes) -> dict:
        fields = decode_records(features, [record])
        tokens = np.zeros(8, np.int32)
        tokens[:len(fields["tokens"][0])] = fields["tokens"][0]
        return {"tokens": tokens, "label": fields["label"][0]}

    with ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), url, decode=decode,
                                 cache=ShardCache(tmp_path / "cache")) as src:
        batch = src.get_batch(8)
    assert np.asarray(batch["label"]).tolist() == list(range(8))
    assert np.asarray(batch["tokens"])[4].tolist() == [0, 1, 2, 3, 4, 0, 0, 0]
    with pytest.raises(DataraxError, match=f"'{s3.url('nothing')}' holds no datarax_dataset.json: "
                                           "not a finished dataset"):
        read_metadata(s3.url("nothing"))


def test_the_cache_folder_and_limit_come_from_the_environment(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datarax.storage import CacheFullError, ShardCache

    url = s3.upload_folder(local_dataset, "ds")
    folder = tmp_path / "from-env"
    monkeypatch.setenv("DATARAX_CACHE_DIR", str(folder))
    monkeypatch.setenv("DATARAX_CACHE_BYTES", "300K")  # two shards of 128 KiB, not all six
    with pytest.raises(CacheFullError, match=f"'{folder}' \\(limit 307200 bytes\\).*DATARAX_CACHE_BYTES"):
        source(url, shuffle_files=True, seed=0)  # a global shuffle needs every shard
    with source(url, shuffle_files=True, shuffle_window=1, seed=0) as src:
        assert sorted(read(src)) == list(range(SHARDS * PER_SHARD))
        stats = src.stats()["storage"]
    assert stats["cache_dir"] == str(folder) and stats["evicted"] > 0
    assert len(list((folder / "shards").iterdir())) <= 2
    assert ShardCache().usage() <= 300 << 10


@pytest.mark.parametrize("cached", [1, 3, 4])  # 1: the smallest that works (the window)
def test_a_cache_smaller_than_the_dataset_with_window_shuffle(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, cached: int) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    shard = os.path.getsize(os.path.join(local_dataset, shard_names(local_dataset)[0]))
    limit = cached * shard + 100
    with source(url, tmp_path, max_bytes=limit, shuffle_files=True, shuffle_window=1, seed=2) as src:
        first = read(src)
        src.seek(1)
        second = read(src)
        stats = src.stats()["storage"]
        assert src.get_state()["shuffled_indices"]["window"] == 1
    n = SHARDS * PER_SHARD
    assert sorted(first) == sorted(second) == list(range(n)) and first != second
    for epoch in (first, second):  # window 1: each shard's records together
        assert [len({i // PER_SHARD for i in epoch[k:k + PER_SHARD]}) for k in range(0, n, PER_SHARD)] \
            == [1] * SHARDS
    assert stats["evicted"] > 0 and stats["fetched"] > SHARDS
    from datarax.storage import ShardCache

    assert ShardCache(tmp_path / "cache", max_bytes=limit).usage() <= limit


def test_resume_mid_epoch_from_a_state_is_exact(s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    with source(url, tmp_path, shuffle_files=True, shuffle_window=2, seed=3) as src:
        whole = read(src)
    with source(url, tmp_path, shuffle_files=True, shuffle_window=2, seed=3) as src:
        head = read(src, batches=3)
        state = json.loads(json.dumps(src.get_state()))
    with source(url, tmp_path, shuffle_files=True, shuffle_window=2, seed=3) as src:
        src.set_state(state)
        assert head + read(src) == whole


def test_throttling_is_retried_and_counted(s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    name = shard_names(local_dataset)[2]
    s3.proxy.throttle(name, 2)
    with source(url, tmp_path) as src:
        assert read(src) == list(range(SHARDS * PER_SHARD))
        stats = src.stats()["storage"]
    assert stats["throttled"] >= 2 and stats["retries"] >= 2
    assert s3.proxy.throttles[name] == 0


def test_a_connection_reset_mid_file_resumes_the_download(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    from datarax.storage import Fetcher, list_objects

    url = s3.upload_folder(local_dataset, "ds")
    name = shard_names(local_dataset)[1]
    (obj,) = list_objects(f"{url}/{name}")
    assert obj.size == os.path.getsize(os.path.join(local_dataset, name))
    part = tmp_path / "part"
    part.write_bytes(b"\0" * obj.size)
    s3.proxy.reset_mid_body(name, 1, after=2)  # the third of 8 range requests is cut
    fetcher = Fetcher(chunk=obj.size // 8)
    fetcher.download(obj, str(part))
    assert part.read_bytes() == pathlib.Path(local_dataset, name).read_bytes()
    stats = fetcher.stats.snapshot()
    assert stats["resumed"] == 1 and stats["retries"] == 1 and stats["throttled"] == 0
    assert s3.proxy.count("GET", name) == 9 and s3.proxy.resets[name] == 0
    s3.proxy.reset_mid_body(name, 1)  # through a source: the file is read whole all the same
    with source(url, tmp_path) as src:
        assert read(src) == list(range(SHARDS * PER_SHARD))
        assert src.stats()["storage"]["retries"] == 1
    assert not list((tmp_path / "cache").glob("tmp/*.part"))


def test_a_download_of_many_pieces_is_exact_and_checked_against_its_sha256(
        s3: S3, tmp_path: pathlib.Path) -> None:
    import hashlib

    from datarax.storage import Fetcher, list_objects
    from datarax.storage.errors import RemoteObjectError
    from datarax.storage.urls import RemoteObject
    from datarax.storage.versions import PIECE

    data = np.random.default_rng(0).integers(0, 256, 2 * PIECE + 12345, np.uint8).tobytes()
    s3.put("pieces/a.bin", data)
    (listed,) = list_objects(s3.url("pieces/a.bin"))
    for sha in (hashlib.sha256(data).hexdigest(), "0" * 64):
        part = tmp_path / f"{sha[:4]}.part"
        part.write_bytes(b"\0" * len(data))
        fetcher = Fetcher()
        obj = RemoteObject(listed.url, len(data), sha256=sha)
        if sha.startswith("0000"):
            with pytest.raises(RemoteObjectError, match=f"its SHA-256 is {hashlib.sha256(data).hexdigest()}"):
                fetcher.download(obj, str(part))
        else:
            fetcher.download(obj, str(part))  # one request, written piece by piece
            assert part.read_bytes() == data
    assert s3.proxy.count("GET", "pieces/a.bin") == 2 and s3.proxy.sent("pieces/a.bin") == 2 * len(data)


@pytest.mark.parametrize("change", ["rewritten", "truncated", pytest.param("deleted", marks=pytest.mark.slow)])
def test_an_object_changed_mid_epoch_is_named_or_skipped(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, change: str) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    name = shard_names(local_dataset)[4]
    with open(os.path.join(local_dataset, name), "rb") as f:
        original = f.read()

    def spoil() -> None:
        if change == "deleted":
            s3.delete(f"ds/{name}")
        elif change == "truncated":  # shorter: its ranges end past the object's end
            s3.put(f"ds/{name}", original[: len(original) // 3])
        else:  # same size, other bytes
            s3.put(f"ds/{name}", original[:-8] + b"changed!")

    with source(url, tmp_path / "a") as src:  # listed; then the object changes
        spoil()
        with pytest.raises(RecordError, match=f"{name}.*(changed in the store|is missing from the store)") as err:
            read(src)
        assert err.value.path == f"{url}/{name}"
        if change == "truncated":
            assert f"holds {len(original) // 3} bytes now, {len(original)} when listed" in str(err.value)
    s3.put(f"ds/{name}", original)
    with source(url, tmp_path / "b", on_error="skip") as src:
        spoil()
        got = read(src)
        state = src.get_state()
        stats = src.stats()["storage"]
    lost = set(range(4 * PER_SHARD, 5 * PER_SHARD))
    assert got == [i for i in range(SHARDS * PER_SHARD) if i not in lost]
    assert state["skipped"] == PER_SHARD and stats["failed"] == 1  # counted in the state


def test_a_full_disk_or_cache_is_a_clear_error_and_leaves_nothing_partial(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datarax.storage import CacheFullError

    url = s3.upload_folder(local_dataset, "ds")
    with pytest.raises(CacheFullError, match=r"larger than the cache limit of 100 bytes"):
        source(url, tmp_path / "tiny", max_bytes=100)  # refused when built

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with source(url, tmp_path / "full", on_error="skip") as src:  # not a bad record: never skipped
        with pytest.raises(CacheFullError, match="the local disk .* is full"):
            read(src)
    for folder in (tmp_path / "tiny", tmp_path / "full"):
        leftovers = [p for p in folder.rglob("*") if p.is_file() and p.suffix not in (".lock",)]
        assert leftovers == []


# ------------------------------------------------------------ several processes
CHILD = """
import faulthandler, json, os, signal, sys
faulthandler.dump_traceback_later(60, exit=True)  # a hang shows where
import numpy as np
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.storage import ShardCache

url, cache, out, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
src = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2, seed=5),
                              url, cache=ShardCache(cache, max_bytes="64M"))
ids = []
while batches != 0:
    batch = src.get_batch(16)
    if batch is None:
        break
    ids += np.asarray(batch["i"]).tolist()
    batches -= 1
with open(out, "w") as f:
    json.dump({"ids": ids, "state": src.get_state(), "stats": src.stats()["storage"]}, f)
if batches == 0:  # killed mid-epoch: no close, no clean-up
    os.kill(os.getpid(), signal.SIGKILL)
src.close()
"""


def run_child(tmp_path: pathlib.Path, url: str, name: str, batches: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen([sys.executable, str(script), url, str(tmp_path / "cache"),
                             str(tmp_path / f"{name}.json"), str(batches)])


@pytest.mark.slow
def test_two_processes_share_one_cache_and_fetch_each_file_once(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    s3.proxy.latency = 0.05
    children = [run_child(tmp_path, url, name, -1) for name in ("a", "b")]
    assert [c.wait(timeout=90) for c in children] == [0, 0]
    results = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("a", "b")]
    with source(local_dataset, shuffle_files=True, shuffle_window=2, seed=5) as local:
        expected = read(local)
    assert results[0]["ids"] == results[1]["ids"] == expected
    assert sum(r["stats"]["fetched"] for r in results) == SHARDS  # each file downloaded once
    for name in shard_names(local_dataset):
        assert s3.proxy.count("GET", name) == 1


@pytest.mark.slow
def test_a_killed_process_resumes_exactly_from_its_state(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    child = run_child(tmp_path, url, "killed", 4)
    assert child.wait(timeout=120) == -signal.SIGKILL
    saved = json.loads((tmp_path / "killed.json").read_text())
    with source(local_dataset, shuffle_files=True, shuffle_window=2, seed=5) as local:
        expected = read(local)
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    config = ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2, seed=5)
    with ArrayRecordSourceModule(config, url, cache=ShardCache(tmp_path / "cache", max_bytes="64M")) as src:
        src.set_state(saved["state"])
        rest = read(src)
        reused = src.stats()["storage"]["cache_hits"]
    assert len(saved["ids"]) == 64 and saved["ids"] + rest == expected
    assert reused >= 1  # the killed process's downloads are reused
