"""A local folder of data files named as docs/sources/hf.md says it may be: the current
folder (``"."``, which ``datasets`` alone refuses: no dataset name), and a Hub-style
folder with a Parquet shard of no rows (which adds nothing, as among ``data_files``)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("datasets")
pytest.importorskip("pyarrow.parquet")

from datarax.sources import HFEagerConfig, HFEagerSource, HFStreamingConfig, HFStreamingSource  # noqa: E402
from datarax.core.errors import ConfigError  # noqa: E402
from hf_files import write_jsonl, write_parquet  # noqa: E402


@pytest.mark.parametrize("name", [".", "./"])
def test_the_current_folder_reads_as_a_dataset(hf_offline, tmp_path, monkeypatch, name):
    write_parquet(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet",
                  {"label": np.arange(4)})
    monkeypatch.chdir(tmp_path / "ds")
    eager = HFEagerSource(HFEagerConfig(name=name, split="train"))
    assert np.asarray(eager.get_batch_at(0, 4)["label"]).tolist() == [0, 1, 2, 3]
    stream = HFStreamingSource(HFStreamingConfig(name=name, split="train"))
    assert [int(r["label"]) for r in stream] == [0, 1, 2, 3]


def test_a_folder_with_an_empty_parquet_shard_reads_the_others(hf_offline, tmp_path):
    folder = tmp_path / "ds"
    write_parquet(folder / "data" / "train-00000-of-00003.parquet", {"label": np.arange(3)})
    write_parquet(folder / "data" / "train-00001-of-00003.parquet",
                  {"label": np.zeros(0, np.int64)})  # a filter that kept nothing
    write_parquet(folder / "data" / "train-00002-of-00003.parquet", {"label": np.arange(3, 5)})
    eager = HFEagerSource(HFEagerConfig(name=str(folder), split="train"))
    assert sorted(np.asarray(eager.get_batch_at(0, 5)["label"]).tolist()) == [0, 1, 2, 3, 4]
    stream = HFStreamingSource(HFStreamingConfig(name=str(folder), split="train"))
    assert sorted(int(r["label"]) for r in stream) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("config", [HFEagerConfig, HFStreamingConfig])
def test_data_files_of_two_formats_are_refused_naming_both(hf_offline, tmp_path, config):
    # datasets reads every file as the first's format and fails on the rest as "corrupt"
    parquet = write_parquet(tmp_path / "a.parquet", {"label": np.arange(2)})
    jsonl = write_jsonl(tmp_path / "b.jsonl", [{"label": 2}])
    source = HFEagerSource if config is HFEagerConfig else HFStreamingSource
    with pytest.raises(ConfigError) as err:
        source(config(name=None, data_files=[parquet, jsonl], split="train"))
    assert str(err.value) == (
        f"{source.__name__}: data_files mixes formats: parquet ({parquet!r}), json "
        f"({jsonl!r}); one split is read with one format. Convert the files to one "
        "format, or read each format with its own source.")


@pytest.mark.parametrize("missing", ["nope.parquet", "zz-*.parquet"])
def test_a_data_file_that_is_not_there_is_named(hf_offline, tmp_path, monkeypatch, missing):
    write_parquet(tmp_path / "a.parquet", {"label": np.arange(2)})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        HFEagerSource(HFEagerConfig(name=None, data_files=["a.parquet", missing], split="train"))
    what = "matches no files" if "*" in missing else "does not exist"
    assert str(err.value) == (
        f"HFEagerSource: data file {missing!r} of data_files {what} (relative paths are "
        f"read from the current folder, {str(tmp_path)!r}). Check the path.")


@pytest.mark.parametrize("extra", [{"data_files": "a.parquet"}, {"data_dir": "sub"}])
def test_a_saved_dataset_refuses_data_files_it_would_ignore(hf_offline, tmp_path, extra):
    datasets = pytest.importorskip("datasets")
    folder = str(tmp_path / "saved")
    datasets.Dataset.from_dict({"label": [0, 1, 2]}).save_to_disk(folder)
    ((key, value),) = extra.items()
    with pytest.raises(ConfigError) as err:
        HFStreamingSource(HFStreamingConfig(name=folder, split="train", **extra))
    assert str(err.value) == (
        f"HFStreamingSource: {folder!r} is a folder written by save_to_disk, which holds "
        f"its own splits, so {key}={value!r} would be ignored. Drop them to read the saved "
        "dataset, or pass name=None with data_files to read those files.")
