"""A leading ``~`` in a local path is the home folder, wherever a user names a path
(sources, dataset folders, the CLI, the shard cache, checkpoints); URLs are kept."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

from datarax.storage import ShardCache, default_cache_dir, expand_user


@pytest.fixture
def home(tmp_path, monkeypatch) -> pathlib.Path:
    """HOME set to a fresh folder, with the current directory elsewhere (a '~' folder
    made by mistake would land in the current directory)."""
    folder = tmp_path / "home"
    folder.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.chdir(work)
    return folder


def _no_tilde_folder(tmp_path) -> None:
    assert not (tmp_path / "work" / "~").exists()


def test_expand_user_expands_local_paths_and_keeps_urls(home):
    assert expand_user("~/data/x.array_record") == f"{home}/data/x.array_record"
    assert expand_user(pathlib.Path("~/a")) == f"{home}/a"
    assert expand_user(["~/a", "s3://bucket/~/b", "/abs/c"]) == [f"{home}/a", "s3://bucket/~/b", "/abs/c"]
    assert expand_user(("~/a", "gs://b/x")) == (f"{home}/a", "gs://b/x")
    assert expand_user("https://host/~user/x.parquet") == "https://host/~user/x.parquet"
    assert expand_user("relative/x") == "relative/x"
    assert expand_user(None) is None and expand_user(5) == 5  # not paths: left to the caller


def test_dataset_written_and_read_through_the_home_folder(home, tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from datarax.dataset.metadata import find_dataset, read_metadata
    from datarax.dataset.writer import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    info, _ = write_dataset([{"x": np.int32(i)} for i in range(5)], "~/ds", shards=2)
    assert sorted(os.listdir(home / "ds"))[-1] == "datarax_dataset.json"
    _no_tilde_folder(tmp_path)
    assert find_dataset("~/ds") == f"{home}/ds"
    assert read_metadata("~/ds").num_records == 5
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), "~/ds")
    try:
        assert [int(r["x"]) for r in source] == [0, 1, 2, 3, 4]
        assert source.paths[0] == f"{home}/ds/data-00000-of-00002.array_record"
    finally:
        source.close()
    one = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1),
                                  ["~/ds/data-00001-of-00002.array_record"],
                                  decode=lambda r: {"n": np.int32(len(r))})
    try:
        assert len(one) == 3 and one.paths == [f"{home}/ds/data-00001-of-00002.array_record"]
    finally:
        one.close()


def test_cli_convert_and_inspect_take_home_paths(home, tmp_path, capsys):
    pytest.importorskip("array_record.python.array_record_module")
    from datarax.cli.main import main

    np.save(home / "x.npy", np.arange(4, dtype=np.int32))
    assert main(["convert", "~/x.npy", "~/out", "--no-progress"]) == 0
    assert (home / "out" / "datarax_dataset.json").is_file()
    _no_tilde_folder(tmp_path)
    capsys.readouterr()
    assert main(["inspect", "~/out", "--json", "--records", "1", "--grid=~/grid.png"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 4
    assert (home / "grid.png").read_bytes()[:4] == b"\x89PNG"
    _no_tilde_folder(tmp_path)
    (home / "make.py").write_text(
        "import numpy as np\n"
        "from datarax.sources import MemorySource, MemorySourceConfig\n"
        "def source():\n"
        "    return MemorySource(MemorySourceConfig(), {'x': np.arange(3)})\n")
    assert main(["inspect", "py:~/make.py:source", "--json", "--records", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 3


def test_npy_jsonl_and_hf_paths_take_the_home_folder(home):
    from datarax.sources import HFEagerConfig, NpySource, NpySourceConfig
    from datarax.text.document_files import JsonlDocuments

    np.save(home / "a.npy", np.arange(3, dtype=np.int32))
    config = NpySourceConfig(paths={"a": "~/a.npy", "b": ["~/a.npy"]}, num_epochs=1)
    assert config.paths == (("a", (f"{home}/a.npy",)), ("b", (f"{home}/a.npy",)))
    source = NpySource(config)
    try:
        assert [int(r["a"]) for r in source] == [0, 1, 2]
    finally:
        source.close()
    (home / "d.jsonl").write_text('{"text": "hi"}\n')
    assert JsonlDocuments("~/d.jsonl").paths == [f"{home}/d.jsonl"]
    hf = HFEagerConfig(name="json", data_files=["~/d.jsonl", "s3://bucket/e.jsonl"])
    assert hf.data_files == (f"{home}/d.jsonl", "s3://bucket/e.jsonl") and hf.name == "json"
    assert HFEagerConfig(name="~/saved").name == f"{home}/saved"


def test_shard_cache_folder_and_cache_variable_take_the_home_folder(home, monkeypatch):
    assert ShardCache("~/cache").directory == f"{home}/cache"
    monkeypatch.setenv("DATARAX_CACHE_DIR", "~/env-cache")
    assert default_cache_dir() == f"{home}/env-cache"
    assert ShardCache().directory == f"{home}/env-cache"


def test_checkpoint_folder_takes_the_home_folder(home):
    pytest.importorskip("orbax.checkpoint")
    import orbax.checkpoint as ocp

    from datarax.checkpoint import checkpoint_manager

    options = ocp.CheckpointManagerOptions(create=False)
    with checkpoint_manager("~/ckpt", options=options) as manager:
        assert os.fspath(manager.directory) == f"{home}/ckpt"
