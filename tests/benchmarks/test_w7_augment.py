"""W7 harness: the same-work check accepts the chain and refuses other work; the
epoch check counts records. No timing asserts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import augment_data as A  # noqa: E402
from benchmarks import w7_contenders as C  # noqa: E402


def test_numpy_and_datarax_fixed_chains_match_the_reference_and_wrong_work_fails():
    images, _ = A.make_data(4, seed=1)
    assert C.numpy_fixed(images).shape == (4, 64, 64, 3)
    assert A.check_fixed(C.numpy_fixed(images), images) == {"ok": True, "mean_abs_error": 0.0}
    datarax = A.check_fixed(C.datarax_fixed(images), images)
    assert datarax["ok"], datarax
    unflipped = A.check_fixed(C.numpy_fixed(images)[:, :, ::-1], images)
    assert not unflipped["ok"]


def test_epoch_check_counts_records_and_range():
    images, labels = A.make_data(40, size=20, seed=2)
    batches = [(A.digest(out), lab) for out, lab in C.numpy_epoch(images, labels, 16, seed=0)]
    assert A.verify(batches, 40)["ok"]
    assert A.verify(batches[:-1], 40)["problems"] == ["served 32 records, expected 40",
                                                      "8 missing, 0 repeated"]
    raw = [(np.full((16, 3), 300.0), lab) for _, lab in batches]
    assert A.verify(raw, 40)["problems"] == [
        "images out of range after de-normalizing (chain not applied as specified)"]


@pytest.mark.slow
def test_w7_tiny_run_reports_ratios():
    result = __import__("benchmarks.w7_augment", fromlist=["run"]).run(
        200, 1, batch_size=64, contenders=["numpy", "datarax-cold"], log=lambda s: None)
    summary = result["summary"]
    assert summary["numpy"]["status"] == "ok" and summary["datarax-cold"]["status"] == "ok"
    assert "epoch_rate_vs_floor" in summary["datarax-cold"]


def test_summary_ratios_take_peers_only_never_a_datarax_variant():
    from benchmarks.w7_augment import summarize

    def run(rate):
        return [{"epoch_rate": rate, "steady_rate": 2 * rate, "first_batch_s": 0.1, "ok": True,
                 "fixed_check": {"mean_abs_error": 0.0}}]

    summary = summarize({"numpy": run(100.0), "datarax": run(600.0), "datarax-cold": run(900.0),
                         "torch-2": run(300.0), "grain": run(200.0)})
    assert summary["best_peer_steady_rate"] == "torch-2"
    assert summary["datarax"]["steady_rate_vs_best_peer"] == 2.0
    assert summary["datarax-cold"]["epoch_rate_vs_best_peer"] == 3.0
    assert summary["datarax"]["epoch_rate_vs_floor"] == 6.0
