"""Requests made while a remote source is built (the dataset's metadata, the listing of a
glob) are retried and counted in ``stats()["storage"]`` like the downloads; a dataset
folder on S3 read with the user's ``decode``."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    from tests.storage.conftest import S3

N, SHARDS = 12, 3


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("array_record")
    from datarax.dataset import write_dataset

    folder = tmp_path_factory.mktemp("buildstats") / "ds"
    write_dataset([{"i": np.int32(i)} for i in range(N)], folder, shards=SHARDS)
    return str(folder)


def _source(paths: str, tmp_path: pathlib.Path, **kwargs: Any) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), paths,
                                   cache=ShardCache(tmp_path / "cache", max_bytes="16M"), **kwargs)


def _decode(record: bytes) -> dict[str, np.ndarray]:
    return {"i": np.frombuffer(record, np.int32)[0]}


def test_metadata_retries_while_building_are_counted(s3: S3, local_dataset: str,
                                                     tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "ds")
    s3.proxy.throttle("ds/datarax_dataset.json", 2)
    src = _source(url, tmp_path)
    try:
        built = src.stats()["storage"]
        assert (built["retries"], built["throttled"], built["fetched"]) == (2, 2, 0)
        assert s3.proxy.throttles["ds/datarax_dataset.json"] == 0
        assert sorted(int(r["i"]) for r in src) == list(range(N))
        read = src.stats()["storage"]
        assert (read["retries"], read["throttled"], read["fetched"]) == (2, 2, SHARDS)
    finally:
        src.close()


def test_listing_retries_while_building_are_counted(s3: S3, local_dataset: str,
                                                    tmp_path: pathlib.Path) -> None:
    s3.upload_folder(local_dataset, "plain")  # read as plain files: decode= and a glob
    s3.proxy.throttle(f"/{s3.bucket}", 1)  # the bucket listing the glob asks for
    src = _source(s3.url("plain/data-*.array_record"), tmp_path, decode=_decode)
    try:
        built = src.stats()["storage"]
        assert (built["retries"], built["throttled"]) == (1, 1)
        assert [int(r["i"]) for r in src] == list(range(N))
        assert src.dataset_info is None
    finally:
        src.close()


def test_s3_dataset_folder_with_decode_reads_its_metadata_shards(
        s3: S3, local_dataset: str, tmp_path: pathlib.Path) -> None:
    url = s3.upload_folder(local_dataset, "withdecode")
    s3.put("withdecode/README.txt", b"not a shard")
    src = _source(url, tmp_path, decode=_decode)
    try:
        assert [p.rsplit("/", 1)[1] for p in src.paths] == [
            f"data-0000{k}-of-0000{SHARDS}.array_record" for k in range(SHARDS)]
        assert [int(r["i"]) for r in src] == list(range(N))
        assert src.dataset_info is not None and src.dataset_info.num_records == N
    finally:
        src.close()


# ------------------------------------- sources that fetch their files whole when built
def test_npy_listing_and_download_retries_while_building_are_counted(
        s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.sources import NpySource, NpySourceConfig
    from datarax.storage import ShardCache

    folder = tmp_path / "npy"
    folder.mkdir()
    for k in range(2):
        np.save(folder / f"x-{k}.npy", np.arange(5 * k, 5 * k + 5, dtype=np.int32))
    s3.upload_folder(folder, "npy")
    s3.proxy.throttle(f"/{s3.bucket}", 1)  # the bucket listing the glob asks for
    s3.proxy.throttle("npy/x-1.npy", 2)  # its download, while the source is built
    src = NpySource(NpySourceConfig(paths={"x": s3.url("npy/x-*.npy")}),
                    cache=ShardCache(tmp_path / "cache", max_bytes="16M"))
    try:
        built = src.stats()["storage"]
        assert (built["retries"], built["throttled"], built["fetched"]) == (3, 3, 2)
        assert [int(r["x"]) for r in src] == list(range(10))
    finally:
        src.close()


def test_remote_files_count_their_listing_retries(s3: S3, tmp_path: pathlib.Path) -> None:
    """What the Parquet / JSON Lines and text-file sources list their files with."""
    from datarax.sources.remote_files import RemoteFiles
    from datarax.storage import ShardCache

    for k in range(2):
        s3.put(f"jl/part-{k}.jsonl", b'{"i": %d}\n' % k)
    s3.proxy.throttle(f"/{s3.bucket}", 2)
    files = RemoteFiles.listed(s3.url("jl/*.jsonl"), where="test",
                               cache=ShardCache(tmp_path / "cache", max_bytes="1M"))
    try:
        assert files.urls == [s3.url(f"jl/part-{k}.jsonl") for k in range(2)]
        listed = files.stats()
        assert (listed["retries"], listed["throttled"], listed["fetched"]) == (2, 2, 0)
        assert [open(p, "rb").read() for p in files.local_paths()] == [b'{"i": 0}\n',
                                                                       b'{"i": 1}\n']
        fetched = files.stats()
        assert (fetched["retries"], fetched["fetched"], fetched["held"]) == (2, 2, 2)
        files.release()  # the counts outlive the hold
        assert (files.stats()["retries"], files.stats()["fetched"], files.stats()["held"]) == (2, 2, 0)
    finally:
        files.release()


@pytest.mark.slow  # loads Hugging Face datasets
def test_parquet_listing_retries_while_building_are_counted(
        s3: S3, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datarax.sources import HFStreamingConfig, HFStreamingSource
    from datarax.storage import ShardCache

    folder = tmp_path / "pq"
    folder.mkdir()
    pq.write_table(pa.table({"i": pa.array(range(6), pa.int32())}), folder / "train-0.parquet")
    s3.upload_folder(folder, "pq")
    s3.proxy.throttle(f"/{s3.bucket}", 1)
    src = HFStreamingSource(HFStreamingConfig(name=s3.url("pq/train-*.parquet")),
                            cache=ShardCache(tmp_path / "cache", max_bytes="16M"))
    try:
        built = src.stats()["storage"]
        assert (built["retries"], built["throttled"]) == (1, 1)
        assert [int(v) for v in src.get_batch(6)["i"]] == list(range(6))
    finally:
        src.close()
