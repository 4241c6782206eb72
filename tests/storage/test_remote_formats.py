"""``.npy``, Parquet and JSON Lines sources read from a real S3 server (moto, through the
proxy of ``conftest.py``) the way a user writes it: a URL where the local path goes.

Each format: the same records as the local files, in the same (shuffled) order; exact
resume from a mid-epoch state; a second epoch reads only the shard cache; a missing
object's error names its URL.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from datarax.core.errors import ConfigError, MissingExtraError, RecordError

if TYPE_CHECKING:
    from tests.storage.conftest import S3

BATCH = 8


def cache(tmp_path: pathlib.Path) -> Any:
    from datarax.storage import ShardCache

    return ShardCache(tmp_path / "cache", max_bytes="16M")


def read(src: Any, field: str, batches: int | None = None) -> list[Any]:
    """Values of ``field`` in the order ``src`` hands them out (``batches`` batches, or
    to the end of the epoch)."""
    out: list[Any] = []
    while batches is None or batches > 0:
        batch = src.get_batch(BATCH)
        if batch is None:
            break
        out += np.asarray(batch[field]).tolist()
        batches = None if batches is None else batches - 1
    return out


def gets(s3: S3, names: list[str]) -> int:
    return sum(s3.proxy.count("GET", n) + s3.proxy.count("HEAD", n) for n in names)


def check_like_local(s3: S3, make: Callable[[bool], Any], field: str, names: list[str]) -> None:
    """``make(remote)`` builds the source over the local files (False) or their S3 copies
    (True). Same records, same order; exact resume; epoch 2 makes no request."""
    with make(False) as local:
        expected = read(local, field)
        local.seek(1)
        expected_2 = read(local, field)
    assert sorted(expected) == sorted(expected_2) and expected != expected_2  # shuffled
    with make(True) as remote:
        assert read(remote, field) == expected
        after_1 = gets(s3, names)
        stats = remote.stats()["storage"]
        assert stats["fetched"] == len(names) and stats["failed"] == 0
        remote.seek(1)
        assert read(remote, field) == expected_2
        assert gets(s3, names) == after_1  # epoch 2: no listing, no download
        assert remote.stats()["storage"]["fetched"] == len(names)
    with make(True) as remote:  # a restart: listed again, every file from the cache
        head = read(remote, field, batches=3)
        state = remote.get_state()
        assert remote.stats()["storage"]["cache_hits"] >= len(names)
        assert remote.stats()["storage"]["fetched"] == 0
    with make(True) as resumed:
        resumed.set_state(state)
        assert head + read(resumed, field) == expected


# ----------------------------------------------------------------------- .npy
def npy_files(folder: pathlib.Path) -> list[str]:
    rng = np.random.default_rng(0)
    names = []
    for k, rows in enumerate((23, 17)):
        start = 23 * k
        np.save(folder / f"x-{k}.npy", np.arange(start, start + rows, dtype=np.int32))
        np.save(folder / f"y-{k}.npy", rng.normal(size=(rows, 3)).astype(np.float32))
        names += [f"x-{k}.npy", f"y-{k}.npy"]
    return names


def test_npy_from_s3_reads_like_the_local_files(s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.sources import NpySource, NpySourceConfig

    folder = tmp_path / "npy"
    folder.mkdir()
    names = npy_files(folder)
    s3.upload_folder(folder, "npy")

    def make(remote: bool) -> Any:
        if remote:  # a glob for one field, a list for the other
            paths = {"x": s3.url("npy/x-*.npy"), "y": [s3.url(f"npy/y-{k}.npy") for k in (0, 1)]}
            return NpySource(NpySourceConfig(paths=paths, shuffle=True, seed=4), cache=cache(tmp_path))
        paths = {"x": [str(folder / f"x-{k}.npy") for k in (0, 1)],
                 "y": [str(folder / f"y-{k}.npy") for k in (0, 1)]}
        return NpySource(NpySourceConfig(paths=paths, shuffle=True, seed=4))

    check_like_local(s3, make, "x", names)
    with make(True) as remote, make(False) as local:
        assert remote.paths["x"] == [s3.url(f"npy/x-{k}.npy") for k in (0, 1)]
        assert remote.locate(30) == (s3.url("npy/x-1.npy"), 7)
        np.testing.assert_array_equal(remote.get_batch(40)["y"], local.get_batch(40)["y"])


def test_a_missing_npy_object_is_named(s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.sources import NpySource, NpySourceConfig

    url = s3.url("npy/absent.npy")
    with pytest.raises(RecordError, match=f"'{url}' does not exist"):
        NpySource(NpySourceConfig(paths=url), cache=cache(tmp_path))
    with pytest.raises(RecordError, match="matches no files"):
        NpySource(NpySourceConfig(paths=s3.url("npy/absent-*.npy")), cache=cache(tmp_path))


def test_a_protocol_without_its_filesystem_names_the_remote_extra(tmp_path: pathlib.Path) -> None:
    import importlib.util

    from datarax.sources import NpySource, NpySourceConfig

    if importlib.util.find_spec("adlfs") is not None:
        pytest.skip("adlfs is installed")
    with pytest.raises(MissingExtraError, match=r"abfs://box/x\.npy.*datarax\[remote\]"):
        NpySource(NpySourceConfig(paths="abfs://box/x.npy"), cache=cache(tmp_path))


def test_npy_fields_may_not_mix_local_paths_and_urls(tmp_path: pathlib.Path) -> None:
    from datarax.sources import NpySource, NpySourceConfig

    with pytest.raises(ConfigError, match="mixes local paths and URLs"):
        NpySource(NpySourceConfig(paths=["a.npy", "s3://bucket/b.npy"]))


# --------------------------------------------------------- Parquet, JSON Lines
def table_files(folder: pathlib.Path, kind: str) -> list[str]:
    names = []
    for k, rows in enumerate((21, 19)):
        ids = range(21 * k, 21 * k + rows)
        name = f"train-{k}.{kind}"
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table({"i": pa.array(ids, pa.int32()), "t": [f"r{i}" for i in ids]})
            pq.write_table(table, folder / name, row_group_size=8)
        else:
            with open(folder / name, "w") as f:
                f.writelines(json.dumps({"i": i, "t": f"r{i}"}) + "\n" for i in ids)
        names.append(name)
    return names


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_a_stream_from_s3_reads_like_the_local_files(s3: S3, tmp_path: pathlib.Path, kind: str) -> None:
    pytest.importorskip("datasets")
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    folder = tmp_path / kind
    folder.mkdir()
    names = table_files(folder, kind)
    s3.upload_folder(folder, kind)
    options = {"shuffle": True, "seed": 5, "shuffle_buffer_size": 8, "chunk_size": 8}

    def make(remote: bool) -> Any:
        base = s3.url(kind) if remote else str(folder)
        if kind == "parquet":  # the file pattern as name=
            config = HFStreamingConfig(name=f"{base}/train-*.parquet", **options)
        else:  # data_files=[...]
            config = HFStreamingConfig(data_files=[f"{base}/{n}" for n in names], **options)
        return HFStreamingSource(config, cache=cache(tmp_path) if remote else None)

    check_like_local(s3, make, "i", names)
    with make(True) as remote:
        assert remote.config.name in (None, f"{s3.url(kind)}/train-*.parquet")  # URLs kept
        assert read(remote, "t", batches=1)[0].startswith("r")


@pytest.mark.parametrize("split", ["", ":train", ":train[:30]"])
def test_the_cli_reads_an_hf_source_at_a_bucket_url(s3: S3, tmp_path: pathlib.Path, split: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # hf:s3://bucket/*.jsonl[:SPLIT]: the URL's '://' is not the split's ':' (before: the
    # name 's3', the split '//bucket/...', looked up on the Hugging Face Hub)
    pytest.importorskip("datasets")
    from datarax.cli.main import main

    folder = tmp_path / "jsonl"
    folder.mkdir()
    table_files(folder, "jsonl")
    s3.upload_folder(folder, "jsonl")
    monkeypatch.setenv("DATARAX_CACHE_DIR", str(tmp_path / "cache"))
    target = f"hf:{s3.url('jsonl')}/train-*.jsonl{split}"
    assert main(["scan", target, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["good"], report["bad"]) == (30 if split.endswith("]") else 40, 0)


def test_an_eager_split_from_s3_is_loaded_like_the_local_one(s3: S3, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("datasets")
    from datarax.sources import from_hf
    from datarax.sources.hf import HFEagerSource

    folder = tmp_path / "pq"
    folder.mkdir()
    names = table_files(folder, "parquet")
    s3.upload_folder(folder, "pq")
    local = from_hf(str(folder / "train-*.parquet"), shuffle=True, seed=6)
    remote = from_hf(s3.url("pq/train-*.parquet"), shuffle=True, seed=6, cache=cache(tmp_path))
    assert isinstance(remote, HFEagerSource)  # a small split: loaded, files released
    np.testing.assert_array_equal(remote.get_batch_at(0, 40)["i"], local.get_batch_at(0, 40)["i"])
    assert gets(s3, names) > 0


def test_a_missing_table_object_is_named(s3: S3, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("datasets")
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    url = s3.url("pq/absent.parquet")
    with pytest.raises(RecordError, match=f"'{url}' does not exist"):
        HFStreamingSource(HFStreamingConfig(name=url), cache=cache(tmp_path))
    with pytest.raises(ConfigError, match="names no data file"):
        HFStreamingSource(HFStreamingConfig(name=s3.url("pq")), cache=cache(tmp_path))


def test_every_pass_reads_the_cached_copy_even_after_the_object_is_deleted(
        s3: S3, tmp_path: pathlib.Path) -> None:
    """The cached copy stays valid: deleting the object after the source is built does
    not disturb reading, and a restart finds the copy in the cache (listing fails first,
    naming the URL)."""
    pytest.importorskip("datasets")
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    folder = tmp_path / "pq"
    folder.mkdir()
    table_files(folder, "parquet")
    s3.upload_folder(folder, "pq")
    url = s3.url("pq/train-0.parquet")
    with HFStreamingSource(HFStreamingConfig(name=url), cache=cache(tmp_path)) as src:
        s3.delete("pq/train-0.parquet")
        assert read(src, "i") == list(range(21))
        src.seek(1)
        assert read(src, "i") == list(range(21))
    with pytest.raises(RecordError, match=f"'{url}' does not exist"):
        HFStreamingSource(HFStreamingConfig(name=url), cache=cache(tmp_path))
    assert os.listdir(tmp_path / "cache" / "shards")  # the copy is still there
