"""Resuming a conversion as a user does: interrupted (a bad row, a kill), the input edited
or fixed, then ``--resume``: a changed finished shard is refused by name, a fix resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from dataset_helpers import read_dataset
from killer_rows import numbered

from datarax.cli.main import main
from datarax.dataset.writer import PARTIAL_DIR, ConversionError, write_dataset

HERE = os.path.dirname(os.path.abspath(__file__))


def _shards(dst) -> dict[str, bytes]:
    return {n: open(os.path.join(dst, n), "rb").read() for n in sorted(os.listdir(dst))
            if n.endswith(".array_record") or n == "datarax_dataset.json"}


def _csv(path, bad: int | None = None, edit: int | None = None) -> str:
    """40 rows ``a,s``; row ``bad`` holds text that is not UTF-8, row ``edit`` other text."""
    lines = [b"a,s"]
    for i in range(40):
        text = b"caf\xe9" if i == bad else b"edited" if i == edit else b"t%d" % i
        lines.append(b"%d,%s" % (i, text))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def test_cli_resume_after_a_fixed_row_works_and_after_an_edited_finished_shard_is_refused(
        tmp_path, capsys) -> None:
    src, dst = tmp_path / "t.csv", str(tmp_path / "ds")
    _csv(src, bad=25)  # shards of 10 rows: 0 and 1 finish, shard 2 stops at row 25
    assert main(["convert", str(src), dst, "--shards", "4", "--no-progress"]) == 2
    assert "row 25, field 's': text is not valid UTF-8" in capsys.readouterr().err
    _csv(src, edit=13)  # the bad row fixed, and a row of the finished shard 1 edited
    assert main(["convert", str(src), dst, "--shards", "4", "--no-progress", "--resume"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("holds an unfinished conversion whose finished shard 'data-00001-of-00004."
            "array_record' (rows 10..19) no longer matches csv files " + str(src) +
            ": row 13 gives another record than the shard holds.") in err
    assert "Restore the input as it was" in err and "overwrite=True (--overwrite)" in err
    _csv(src)  # row 13 restored: only the fix of the unfinished shard's row remains
    assert main(["convert", str(src), dst, "--shards", "4", "--no-progress", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "wrote " + dst + ": 40 records" in out and "(2 resumed)" in out
    assert main(["convert", str(src), str(tmp_path / "fresh"), "--shards", "4",
                 "--no-progress"]) == 0
    assert _shards(dst) == _shards(tmp_path / "fresh")  # as if never interrupted
    assert list(read_dataset(dst)["s"]) == [f"t{i}" for i in range(40)]


def _killed(tmp_path, dst, *, kill_at: int | None = None, records: str = "numbered(80)",
            before_run_file: bool = False, **options) -> None:
    """Run ``write_dataset`` of ``records`` into ``dst`` in a process killed (SIGKILL) at
    row ``kill_at``, or just before it writes its run file."""
    script = (f"import os, signal, sys; sys.path.insert(0, {HERE!r})\n"
              "import numpy as np\n"
              "from killer_rows import KillingList, numbered\n"
              "import datarax.dataset.resume as resume\n"
              "from datarax.dataset import write_dataset\n"
              "real = resume.write_json\n"
              "def write_json(path, data, **kw):\n"
              f"    if {before_run_file!r} and path.endswith('run.json'):\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "    return real(path, data, **kw)\n"
              "resume.write_json = write_json\n"
              f"rows = KillingList({records})\n"
              f"rows.kill_at = {kill_at!r}\n"
              f"write_dataset(rows, {str(dst)!r}, **{options!r})\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -9, done.stderr


def test_a_write_killed_after_two_of_eight_shards_refuses_an_edited_list(tmp_path) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, kill_at=25, shards=8)  # shards of 10 rows: 0 and 1 finished
    assert sorted(n for n in os.listdir(dst) if n.endswith(".array_record")) == [
        "data-00000-of-00008.array_record", "data-00001-of-00008.array_record"]
    edited = numbered(80)
    edited[14] = {"x": np.full((2,), -1, np.float32), "name": "r14"}  # same count, shard 1
    with pytest.raises(ConversionError, match=r"finished shard 'data-00001-of-00008.array_record' "
                                              r"\(rows 10..19\) no longer matches a sequence of "
                                              r"records: row 14 gives another record"):
        write_dataset(edited, dst, shards=8, resume=True)
    info, summary = write_dataset(numbered(80), dst, shards=8, resume=True)
    assert summary.shards_resumed == 2 and info.num_records == 80
    assert read_dataset(dst)["x"][:, 0].tolist() == list(range(80))


def test_resuming_with_on_error_skip_works_and_a_finished_row_turned_bad_is_refused(
        tmp_path) -> None:
    records = numbered(40, bad=25)  # shard 2 of 4
    with pytest.raises(ConversionError, match=r"row 25, field 'x': shape \(5,\)"):
        write_dataset(records, tmp_path / "ds", shards=4)
    # the way the error offers: resume leaving the bad row out
    info, summary = write_dataset(records, tmp_path / "ds", shards=4, on_error="skip",
                                  resume=True)
    assert summary.shards_resumed == 2 and [s["row"] for s in info.skipped] == [25]
    write_dataset(records, tmp_path / "fresh", shards=4, on_error="skip")
    assert _shards(tmp_path / "ds") == _shards(tmp_path / "fresh")
    # a row of a finished shard that now fails, or one that was left out and now fits
    dst = tmp_path / "again"
    _killed(tmp_path, dst, kill_at=30, records="numbered(40)", shards=4)
    with pytest.raises(ConversionError, match=r"'data-00000-of-00004.array_record' \(rows 0..9\) "
                                              r"no longer matches a sequence of records: row 3 was "
                                              r"written, and now does not match the features"):
        write_dataset(numbered(40, bad=3), dst, shards=4, on_error="skip", resume=True)


def test_a_skipped_row_of_a_finished_shard_under_on_error_raise_says_to_skip(tmp_path) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, kill_at=30, records="numbered(40, bad=3)", shards=4, on_error="skip")
    records = numbered(40, bad=3)
    with pytest.raises(ConversionError, match=r"row 3 was left out \(on_error='skip' then\), and "
                                              r"on_error='raise' now stops at it.*Resume with "
                                              r"on_error='skip' \(--on-error skip\)"):
        write_dataset(records, dst, shards=4, resume=True)
    records[3] = numbered(4)[3]  # the row fixed: the finished shard lacks it
    with pytest.raises(ConversionError, match=r"row 3 was left out \(it did not match the "
                                              r"features\), and now is a good record"):
        write_dataset(records, dst, shards=4, on_error="skip", resume=True)
    records = numbered(40, bad=3)
    info, summary = write_dataset(records, dst, shards=4, on_error="skip", resume=True)
    assert summary.shards_resumed == 3 and [s["row"] for s in info.skipped] == [3]


def test_a_write_killed_before_its_run_file_resumes_from_scratch(tmp_path, capsys) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, before_run_file=True, shards=2)
    assert [n for n in os.listdir(dst) if not n.startswith(".datarax-lock")] == [PARTIAL_DIR]
    info, summary = write_dataset(numbered(80), dst, shards=2, resume=True)
    assert summary.shards_resumed == 0 and info.num_records == 80
    # a plain run into such a folder is no conversion in the way either (the CLI path)
    np.save(tmp_path / "x.npy", np.arange(8, dtype=np.float32))
    for flags in ([], ["--resume"]):
        os.makedirs(tmp_path / "cli" / PARTIAL_DIR)
        assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "cli"), "--no-progress",
                     *flags]) == 0, capsys.readouterr().err
        assert "wrote " in capsys.readouterr().out
        assert read_dataset(tmp_path / "cli")["x"].tolist() == list(range(8))
        os.rename(tmp_path / "cli", tmp_path / f"cli{len(flags)}")


def test_other_options_are_named_and_a_run_without_finished_shards_starts_over(tmp_path) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, kill_at=25, shards=4)  # shard 0 finished (rows 0..19)
    with pytest.raises(ConversionError, match=r"unfinished conversion of other records or "
                                              r"options \(shards=4 \(--shards 4\) then, 2 now\)"):
        write_dataset(numbered(80), dst, shards=2, resume=True)
    with pytest.raises(ConversionError, match=r"options \(the input had 80 rows, now 79\); resume "
                                              r"it with the input and options it was started with"):
        write_dataset(numbered(79), dst, shards=4, resume=True)
    other = tmp_path / "other"
    _killed(tmp_path, other, kill_at=5, shards=4)  # killed in shard 0: nothing finished
    info, summary = write_dataset(numbered(60), other, shards=3, resume=True)
    assert summary.shards_resumed == 0 and [s.records for s in info.shards] == [20, 20, 20]


@pytest.mark.slow
def test_worker_processes_check_the_finished_shards_and_name_the_first_changed(tmp_path) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, kill_at=45, shards=8)  # shards 0..3 finished
    edited = numbered(80)
    edited[35]["name"] = "edited"  # shard 3
    edited[12]["name"] = "edited"  # shard 1: the first named
    with pytest.raises(ConversionError, match=r"finished shard 'data-00001-of-00008.array_record' "
                                              r"\(rows 10..19\).*row 12 gives another record"):
        write_dataset(edited, dst, shards=8, workers=2, resume=True)
    info, summary = write_dataset(numbered(80), dst, shards=8, workers=2, resume=True)
    assert summary.shards_resumed == 4 and info.num_records == 80
    assert read_dataset(dst)["x"][:, 0].tolist() == list(range(80))


def test_finished_shards_without_their_run_file_are_refused_not_guessed(tmp_path) -> None:
    dst = tmp_path / "ds"
    _killed(tmp_path, dst, kill_at=25, shards=4)
    os.remove(dst / PARTIAL_DIR / "run.json")
    with pytest.raises(ConversionError, match=r"holds shards of an unfinished conversion but no "
                                              r"record of what they were written from .*overwrite"):
        write_dataset(numbered(80), dst, shards=4, resume=True)
    shutil.rmtree(dst / PARTIAL_DIR)  # the shards alone
    with pytest.raises(ConversionError, match=r"no record of what they were written from"):
        write_dataset(numbered(80), dst, shards=4, resume=True)
    info, summary = write_dataset(numbered(80), dst, shards=4, overwrite=True)
    assert info.num_records == 80 and summary.shards_resumed == 0


def test_resuming_a_finished_dataset_with_other_options_names_them(tmp_path) -> None:
    dst = tmp_path / "ds"
    write_dataset(numbered(30), dst, shards=3)
    with pytest.raises(ConversionError, match=r"finished dataset written from other records or "
                                              r"options \(shards=3 \(--shards 3\) then, 2 now\)\. "
                                              r"Run it with the input and options it was written "
                                              r"with .* pass overwrite=True \(--overwrite\)"):
        write_dataset(numbered(30), dst, shards=2, resume=True)
    with pytest.raises(ConversionError, match=r"\(on_error='raise' \(--on-error raise\) then, "
                                              r"'skip' now\)"):
        write_dataset(numbered(30), dst, shards=3, on_error="skip", resume=True)
    with pytest.raises(ConversionError, match=r"\(the input had 30 rows, now 31\)"):
        write_dataset(numbered(31), dst, shards=3, resume=True)
    info, summary = write_dataset(numbered(30), dst, shards=3, resume=True)  # the same: kept
    assert summary.shards_resumed == 3 and info.num_records == 30


def test_a_finished_dataset_of_an_older_datarax_names_what_its_shards_tell(tmp_path) -> None:
    import json

    dst = tmp_path / "ds"
    write_dataset(numbered(30), dst, shards=3)
    meta_path = dst / "datarax_dataset.json"
    meta = json.loads(meta_path.read_text())
    del meta["extra"]["written_with"]  # as an older datarax wrote it
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ConversionError, match=r"\(shards=3 \(--shards 3\) then, 2 now\)"):
        write_dataset(numbered(30), dst, shards=2, resume=True)
    with pytest.raises(ConversionError, match=r"\(its source or on_error may differ: written by "
                                              r"an older datarax, it does not record them\)"):
        write_dataset(numbered(30), dst, shards=3, on_error="skip", resume=True)
