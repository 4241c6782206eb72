"""``benchmarks/device_check.py`` at its smoke size: every section runs and checks its work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import device_check  # noqa: E402


@pytest.mark.slow  # every section of the device check at tiny sizes: ~9 s
def test_device_check_tiny_runs_its_sections_and_verifies_the_work(tmp_path):
    out = tmp_path / "device_check.json"
    report = device_check.main(["--tiny", "--sections", "h2d,overlap,w1", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["size"] == "tiny" and report["backend"] == "cpu"
    assert "fused" not in report
    for section in ("h2d", "overlap", "w1"):
        assert report[section]["checks_ok"] is True, (section, report[section])
    assert report["h2d"]["bytes"] == 1024 * 1024
    assert report["h2d"]["device_put_gbps"] > 0 and report["h2d"]["numpy_copy_gbps"] > 0
    for kind in ("indexed", "augmented", "host", "host_processes", "compute"):  # 1,024 records, batches of 256
        overlap = report["overlap"][kind]
        assert overlap["steps"] == 4 and 0.0 <= overlap["hidden"] <= 1.0, (kind, overlap)
    assert report["overlap"]["train_ms"] == 5.0
    assert report["overlap"]["host_processes"]["decode_processes"] >= 1
    assert report["w1"]["records"] == 1024 and report["w1"]["datarax_problems"] == []


@pytest.mark.slow  # compiles the digits classifier twice (loop and scan): ~10 s
def test_device_check_fused_section_trains_the_same_steps_both_ways():
    report = device_check.run("tiny", ("fused",))
    fused = report["fused"]
    assert fused["checks_ok"] is True  # the per-step losses of loop and scan agree
    assert fused["steps"] == 8 and fused["chunk"] == 4
    assert fused["loop_steps_per_s"] > 0 and fused["scan_steps_per_s"] > 0
    for other in ("fused_nnx_conv", "fused_mlp"):  # nnx.Conv called directly; an MLP
        assert report[other]["checks_ok"] is True, (other, report[other])
