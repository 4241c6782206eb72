"""A local folder of data files named as docs/sources/hf.md says it may be: the current
folder (``"."``, which ``datasets`` alone refuses: no dataset name), and a Hub-style
folder with a Parquet shard of no rows (which adds nothing, as among ``data_files``)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("datasets")
pytest.importorskip("pyarrow.parquet")

from datarax.sources import HFEagerConfig, HFEagerSource, HFStreamingConfig, HFStreamingSource  # noqa: E402
from hf_files import write_parquet  # noqa: E402


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
