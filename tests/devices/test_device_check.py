"""``benchmarks/device_check.py`` at its smoke size: every section runs and checks its work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import device_check  # noqa: E402


def test_device_check_tiny_runs_every_section_and_verifies_the_work(tmp_path):
    out = tmp_path / "device_check.json"
    report = device_check.main(["--tiny", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["size"] == "tiny" and report["backend"] == "cpu"
    for section in ("h2d", "overlap", "w1", "fused"):
        assert report[section]["checks_ok"] is True, (section, report[section])
    assert report["h2d"]["bytes"] == 1024 * 1024
    assert report["overlap"]["steps"] == 4 and 0.0 <= report["overlap"]["hidden"] <= 1.0
    assert report["w1"]["records"] == 1024
    assert report["fused"]["steps"] == 8 and report["fused"]["chunk"] == 4
    for key in ("device_put_gbps", "numpy_copy_gbps"):
        assert report["h2d"][key] > 0
