"""Smoke test of the benchmark harness: tiny sizes, one repetition, no timing asserts.

Runs W1 for the contenders that start quickly (each in its own process, as the suite
does) and checks that every one served the same records, transformed the same way,
so their checksums agree; then checks that the verifier catches skipped work.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report, run  # noqa: E402
from benchmarks.contenders import CONTENDERS  # noqa: E402
from benchmarks.vision_data import digest, expected_checksum, make_data, verify  # noqa: E402

QUICK = ["numpy", "datarax-cold", "grain", "torch-0"]  # quick starters; no cache warm-up run


@pytest.mark.slow
def test_w1_tiny_checksums_agree_and_report_is_written(tmp_path):
    result = run.run_suite(["W1"], reps=1, scale="tiny", contenders=QUICK, log=lambda s: None)
    paths = report.write(result, tmp_path)
    summary = result["vision"]["W1 vision b256"]["summary"]
    assert list(summary) == QUICK
    images, _ = make_data(600, seed=0)
    want = expected_checksum(images)
    for name, row in summary.items():
        if CONTENDERS[name].missing():
            assert row["status"].startswith("missing")
            continue
        assert row["status"] == "ok", (name, row)
        assert row["checksum"] == pytest.approx(want, rel=1e-6), name
        assert row["checksum_agrees"] is True
    runs = result["vision"]["W1 vision b256"]["runs"]["datarax-cold"][0]
    assert runs["batches"] == 3  # 256 + 256 + a short last batch of 88
    text = paths["md"].read_text()
    assert "W1 vision b256" in text and "numpy" in text and "datarax" in text
    assert paths["json"].exists()


def _epoch(images, labels, *, flip=True, drop=0, scale=255.0):
    rng = np.random.default_rng(1)
    order = rng.permutation(len(images))[drop:]
    out = images[order].astype(np.float32) / np.float32(scale)
    if flip:
        mask = rng.random(order.size) < 0.5
        out[mask] = out[mask, :, ::-1]
    return [(digest(out[i : i + 256]), labels[order][i : i + 256]) for i in range(0, order.size, 256)]


def test_verify_accepts_honest_work_and_names_skipped_work():
    images, labels = make_data(2000, seed=3)
    honest = verify(images, _epoch(images, labels))
    assert honest["ok"] and honest["records"] == 2000
    assert honest["checksum"] == pytest.approx(expected_checksum(images), rel=1e-6)
    assert verify(images, _epoch(images, labels, flip=False))["problems"] == [
        "flip fraction 0.000 is not about 0.5"
    ]
    dropped = verify(images, _epoch(images, labels, drop=5))
    assert dropped["problems"] == ["served 1995 records, expected 2000", "5 records missing, 0 repeated"]
    unscaled = verify(images, _epoch(images, labels, scale=1.0))
    assert "2000 records do not hold image/255 of their source record" in unscaled["problems"]


def test_missing_contender_is_reported_not_dropped(monkeypatch):
    from benchmarks import suite

    entry = CONTENDERS["torch-0"]
    monkeypatch.setitem(
        CONTENDERS, "torch-0", type(entry)(**{**entry.__dict__, "requires": ("no_such_pkg_xyz",)})
    )
    case = suite.VisionCase("W1", "W1 vision b256", 600, 256)
    result = suite.run_vision("torch-0", case, seed=0)
    assert result == {"contender": "torch-0", "missing": ["no_such_pkg_xyz"]}
    summary = report.summarize_case({"numpy": [], "torch-0": [result]})
    assert summary["torch-0"]["status"] == "missing: no_such_pkg_xyz"


def test_external_workload_without_its_script_is_pending(monkeypatch):
    from benchmarks import external

    monkeypatch.setitem(external.SCRIPTS, "W5", "no_such_bench_script")
    result = external.run_external("W5", "tiny", 1)
    assert result["status"] == "pending"
    assert result["note"] == "benchmarks/no_such_bench_script.py has not landed yet"


def test_w5_hf_streaming_tiny_serves_every_record_both_ways(tmp_path, hf_offline):
    from benchmarks import bench_hf_streaming

    out = bench_hf_streaming.main(
        ["--rows", "1200", "--repeats", "1", "--folder", str(tmp_path / "w5")]
    )
    # main() exits when a contender serves another count; every row was timed
    for name in ("floor", "pipeline", "pipeline_prefetch0", "pipeline_extract"):
        assert out[name]["records_per_s"] > 0, name
    for name in ("pipeline", "pipeline_prefetch0"):
        assert 0.0 <= out["overlap"][name]["hidden"] <= 1.0


def test_report_states_each_runs_load_and_flags_runs_above_the_cores():
    runs = {"numpy": [{"load_avg_1m": [0.5, 0.9]}, {"load_avg_1m": [1.8, 2.6]}]}
    rep = {
        "machine": {"nproc": 2, "usable_cpus": 2},
        "vision": {"W1 vision b256": {"runs": runs, "warm_ups": {}}},
        "imports": {"probes": [{"load_avg_1m": [0.4, 0.5]}]},
        "external": {"W4": {"load_avg_1m": [3.1, 2.0]}},
    }
    loads = report.run_loads(rep)
    assert [(e["what"], e["over"]) for e in loads] == [
        ("W1 vision b256 numpy rep 1", False),
        ("W1 vision b256 numpy rep 2", True),
        ("W3 import probe 1", False),
        ("W4", True),
    ]
    text = "\n".join(report.load_lines(rep))
    assert "0.40–3.10 over 4 runs on 2 usable cores" in text
    assert "2 run(s) ran with the load above the 2 cores" in text
    assert "- W1 vision b256 numpy rep 2: 1.80 → 2.60" in text and "- W4: 3.10 → 2.00" in text
