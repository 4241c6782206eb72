"""write_dataset: shards, metadata, determinism, resume, refusals, bad rows."""

from __future__ import annotations

import os

import numpy as np
import pytest
from dataset_helpers import read_dataset
from killer_rows import KillerRows

from datarax.dataset.format import read_metadata
from datarax.errors import ConfigError
from datarax.dataset.writer import PARTIAL_DIR, ConversionError, WriteSummary, write_dataset


def _records(n: int = 20) -> list[dict]:
    return [{"x": np.full((2,), i, np.float32), "label": i % 3, "name": f"r{i}"} for i in range(n)]


def _shard_bytes(dst) -> dict[str, bytes]:
    return {n: open(os.path.join(dst, n), "rb").read() for n in sorted(os.listdir(dst))}


def test_write_read_back_and_deterministic(tmp_path) -> None:
    info, summary = write_dataset(_records(), tmp_path / "a", shards=3,
                                  class_names={"label": ["a", "b", "c"]}, extra={"source": "t"})
    assert [s.records for s in info.shards] == [6, 7, 7]
    assert summary.records == 20 and summary.shards == 3 and summary.skipped_rows == 0
    meta = read_metadata(tmp_path / "a")
    assert meta.features["label"].class_names == ("a", "b", "c")
    assert meta.extra["source"] == "t"
    out = read_dataset(tmp_path / "a")
    assert out["x"][:, 0].tolist() == list(range(20))
    assert list(out["name"]) == [f"r{i}" for i in range(20)]
    write_dataset(_records(), tmp_path / "b", shards=3, class_names={"label": ["a", "b", "c"]},
                  extra={"source": "t"})
    assert _shard_bytes(tmp_path / "a") == _shard_bytes(tmp_path / "b")
    assert not os.path.exists(tmp_path / "a" / PARTIAL_DIR)


def test_existing_destination_refused_unless_resume_or_overwrite(tmp_path) -> None:
    write_dataset(_records(), tmp_path, shards=2)
    with pytest.raises(ConversionError, match="already holds a finished dataset.*resume=True.*overwrite=True"):
        write_dataset(_records(), tmp_path, shards=2)
    info, summary = write_dataset(_records(), tmp_path, shards=2, resume=True)
    assert summary.shards_resumed == 2 and info.num_records == 20
    with pytest.raises(ConversionError, match="other records or options"):
        write_dataset(_records(10), tmp_path, shards=2, resume=True)
    info, _ = write_dataset(_records(10), tmp_path, shards=2, overwrite=True)
    assert info.num_records == 10


class _Crash(Exception):
    pass


class _CrashingRows(list):
    """A list whose row ``crash_at`` raises once (a killed process, a full disk)."""

    crash_at: int | None = None

    def __getitem__(self, i):
        if i == self.crash_at:
            raise _Crash(f"crash at {i}")
        return super().__getitem__(i)


def test_crash_leaves_no_complete_looking_shard_and_resume_finishes(tmp_path) -> None:
    rows = _CrashingRows(_records())
    rows.crash_at = 15  # inside the last of 3 shards
    with pytest.raises(_Crash):
        write_dataset(rows, tmp_path / "a", shards=3)
    names = sorted(os.listdir(tmp_path / "a"))
    assert names == [PARTIAL_DIR, "data-00000-of-00003.array_record", "data-00001-of-00003.array_record"]
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path / "a" / PARTIAL_DIR))
    with pytest.raises(ConversionError, match="unfinished conversion"):
        write_dataset(_records(), tmp_path / "a", shards=3)
    rows.crash_at = None
    info, summary = write_dataset(rows, tmp_path / "a", shards=3, resume=True)
    assert summary.shards_resumed == 2 and info.num_records == 20
    write_dataset(_records(), tmp_path / "fresh", shards=3)
    assert _shard_bytes(tmp_path / "a") == _shard_bytes(tmp_path / "fresh")


def test_bad_rows_raise_or_are_skipped_and_listed(tmp_path) -> None:
    rows = _records(10)
    rows[4] = {"x": np.zeros(3, np.float32), "label": 1, "name": "bad"}
    rows[7] = {"x": np.zeros(2, np.float32), "label": 1, "name": b"\xff"}
    with pytest.raises(ConversionError, match=r"row 4, field 'x': shape \(3,\).*on_error='skip'"):
        write_dataset(rows, tmp_path / "a", shards=2)
    assert not (tmp_path / "a").exists()  # no shard was finished: DST is left as it was
    info, summary = write_dataset(rows, tmp_path / "b", shards=2, on_error="skip")
    assert summary.skipped_rows == 2 and info.num_records == 8
    assert [(s["row"], s["field"]) for s in info.skipped] == [(4, "x"), (7, "name")]
    assert "not valid UTF-8" in info.skipped[1]["error"]


def test_iterable_of_unknown_length_goes_round_robin(tmp_path) -> None:
    info, _ = write_dataset(iter(_records(7)), tmp_path, shards=2)
    assert [s.records for s in info.shards] == [4, 3]
    assert sorted(read_dataset(tmp_path)["x"][:, 0].tolist()) == list(range(7))


@pytest.mark.slow
def test_two_worker_processes_write_the_same_bytes(tmp_path) -> None:
    write_dataset(_records(200), tmp_path / "one", shards=4)
    write_dataset(_records(200), tmp_path / "two", shards=4, workers=2)
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")


@pytest.mark.slow
def test_a_killed_worker_leaves_no_complete_looking_shard(tmp_path) -> None:
    with pytest.raises(ConversionError, match=r"worker process died \(exit code -9\).*resume=True"):
        write_dataset(KillerRows(40, kill_at=35), tmp_path / "a", shards=4, workers=2)
    finished = sorted(n for n in os.listdir(tmp_path / "a") if n.endswith(".array_record"))
    assert "data-00003-of-00004.array_record" not in finished
    assert not os.path.exists(tmp_path / "a" / "datarax_dataset.json")
    info, summary = write_dataset(KillerRows(40, kill_at=None), tmp_path / "a",
                                  shards=4, resume=True)
    assert info.num_records == 40 and summary.shards_resumed == len(finished)
    assert read_dataset(tmp_path / "a")["x"][:, 0].tolist() == list(range(40))


def test_a_script_with_workers_and_no_main_guard_is_told_to_add_it(tmp_path) -> None:
    # a spawned worker imports the script first; unguarded, its own write_dataset fails there
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text("from datarax.dataset.writer import write_dataset\n"
                      f"write_dataset([{{'x': i}} for i in range(8)], {str(tmp_path / 'ds')!r}, "
                      "shards=2, workers=2)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert ("ConversionError: write_dataset: a worker process died (exit code 1) before it "
            "ran: a worker first imports the script that started it, so a script calling "
            "write_dataset / convert with workers= needs that call under `if __name__ == "
            "'__main__':`") in out.stderr


def test_a_writer_worker_process_imports_no_jax_or_flax():
    # a spawned worker imports these modules (and the rows it writes); JAX/Flax cost ~2 s
    import subprocess
    import sys

    code = ("import sys, datarax.dataset.writer, datarax.dataset.conversion; "
            "print(sorted(m for m in ('jax', 'flax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_summary_counts_read_as_words() -> None:
    assert str(WriteSummary(1, 2_000_000, 1, 0, 1, 0.5)) == (
        "1 record, 2.0 MB in 1 shard (0 resumed), 1 row skipped, 0.5 s (2 records/s)")
    assert str(WriteSummary(10, 0, 2, 2, 0, 0.1)) == (
        "10 records, 0.0 MB in 2 shards, already complete (nothing written)")


def test_shards_and_workers_take_numpy_ints(tmp_path) -> None:
    # shards=np.int64(len(rows) // per_shard): computed with NumPy
    info, summary = write_dataset(_records(), tmp_path / "a", shards=np.int64(3),
                                  workers=np.int32(1))
    assert [s.records for s in info.shards] == [6, 7, 7] and summary.shards == 3
    write_dataset(_records(), tmp_path / "b", shards=3)
    assert _shard_bytes(tmp_path / "a") == _shard_bytes(tmp_path / "b")
    with pytest.raises(ConfigError, match="write_dataset shards must be an int >= 1, got True"):
        write_dataset(_records(), tmp_path / "c", shards=True)
