"""overwrite=True: the new dataset is written beside DST and replaces the old one only once
complete; a failed or interrupted overwrite leaves the old dataset readable."""

from __future__ import annotations

import os

import numpy as np
import pytest
from dataset_helpers import read_dataset

from datarax.dataset.format import read_metadata
from datarax.dataset.replace import aside, beside
from datarax.dataset.writer import PARTIAL_DIR, ConversionError, write_dataset


def _records(n: int, offset: int = 0) -> list[dict]:
    return [{"x": np.full((2,), offset + i, np.float32)} for i in range(n)]


class _Interrupted(Exception):
    pass


class _StoppingRows(list):
    """A list whose row ``stop_at`` raises (an interrupted writer)."""

    stop_at: int | None = None

    def __getitem__(self, i):
        if i == self.stop_at:
            raise _Interrupted(f"stopped at {i}")
        return super().__getitem__(i)


@pytest.fixture
def old(tmp_path):
    """A finished dataset of 6 records (x = 0..5) in 2 shards, beside a file of the user's."""
    dst = tmp_path / "ds"
    write_dataset(_records(6), dst, shards=2)
    (dst / "README.txt").write_text("mine")
    return dst


def _siblings(dst) -> list[str]:
    return sorted(n for n in os.listdir(dst.parent) if n != dst.name)


def test_overwrite_failing_at_a_bad_row_keeps_the_old_dataset(old) -> None:
    new = _records(9, offset=100)
    new[7] = {"x": np.zeros(3, np.float32)}  # in the last shard, after two were finished
    with pytest.raises(ConversionError, match=r"row 7, field 'x'"):
        write_dataset(new, old, shards=3, overwrite=True)
    assert read_dataset(old)["x"][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert read_metadata(old).num_records == 6
    assert sorted(os.listdir(old)) == ["README.txt", "data-00000-of-00002.array_record",
                                       "data-00001-of-00002.array_record", "datarax_dataset.json"]
    assert _siblings(old) == []  # the partial folder beside it is removed


def test_overwrite_replaces_the_dataset_and_leaves_no_temporary_folder(old) -> None:
    info, summary = write_dataset(_records(9, offset=100), old, shards=3, overwrite=True)
    assert info.num_records == 9 and summary.shards_resumed == 0
    assert read_dataset(old)["x"][:, 0].tolist() == list(range(100, 109))
    assert sorted(os.listdir(old)) == [
        "README.txt", "data-00000-of-00003.array_record", "data-00001-of-00003.array_record",
        "data-00002-of-00003.array_record", "datarax_dataset.json"]  # the old shards are gone
    assert _siblings(old) == []
    assert not os.path.exists(beside(old)) and not os.path.exists(aside(old))


def test_interrupted_overwrite_then_a_rerun_replaces_it(old) -> None:
    rows = _StoppingRows(_records(8, offset=50))
    rows.stop_at = 6  # in the second of 2 shards: the first was finished beside DST
    with pytest.raises(_Interrupted):
        write_dataset(rows, old, shards=2, overwrite=True)
    assert read_dataset(old)["x"][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert _siblings(old) == []
    rows.stop_at = None
    info, _ = write_dataset(rows, old, shards=2, overwrite=True)
    assert info.num_records == 8
    assert read_dataset(old)["x"][:, 0].tolist() == list(range(50, 58))


def test_overwrite_clears_what_a_killed_overwrite_left_beside(old) -> None:
    left = beside(old)  # a write killed while replacing DST leaves its folder
    os.makedirs(os.path.join(left, PARTIAL_DIR))
    with open(os.path.join(left, "data-00000-of-00001.array_record"), "wb") as f:
        f.write(b"half")
    write_dataset(_records(3, offset=7), old, overwrite=True)
    assert read_dataset(old)["x"][:, 0].tolist() == [7, 8, 9]
    assert _siblings(old) == []


def test_overwrite_of_an_unfinished_conversion_keeps_it_resumable_on_failure(tmp_path) -> None:
    dst = tmp_path / "ds"
    rows = _StoppingRows(_records(8))
    rows.stop_at = 6
    with pytest.raises(_Interrupted):
        write_dataset(rows, dst, shards=2)  # one shard finished, one not
    with pytest.raises(_Interrupted):
        write_dataset(rows, dst, shards=2, overwrite=True)
    rows.stop_at = None
    info, summary = write_dataset(rows, dst, shards=2, resume=True)  # still there to resume
    assert summary.shards_resumed == 1 and info.num_records == 8
    assert not os.path.exists(dst / PARTIAL_DIR) and _siblings(dst) == []


def test_overwrite_failing_in_a_worker_process_says_to_overwrite_again(old) -> None:
    new = _records(9, offset=100)
    new[4] = {"x": np.zeros(3, np.float32)}  # shard 1 of 3: the worker process writes it
    with pytest.raises(ConversionError) as failed:
        write_dataset(new, old, shards=3, workers=2, overwrite=True)
    message = str(failed.value)
    assert "field 'x'" in message and "overwrite=True" in message
    assert "resume=True" not in message  # nothing to resume: the old dataset is kept
    assert read_dataset(old)["x"][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert _siblings(old) == []
