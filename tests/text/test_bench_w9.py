"""W9 benchmark script at a tiny size: every contender packs exactly the same tokens."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_text_packing


def test_w9_tiny_run_does_the_same_work_everywhere(tmp_path) -> None:
    out = tmp_path / "w9.json"
    code = bench_text_packing.main(
        ["--docs", "150", "--words", "60", "--seq-len", "128", "--json", str(out)]
    )
    data = json.loads(out.read_text())
    assert code == 0
    assert sorted(data["results"]) == [
        "datarax", "datarax-concat", "datarax-prefetch0", "floor", "grain"
    ]
    for name, r in data["results"].items():
        assert r["same_work"] is True, name
        assert r["tokens"] == data["tokens"]
        assert 0 < r["efficiency"] <= 1
    # datarax and the floor use the same first-fit policy: identical rows
    assert data["results"]["datarax"]["rows"] == data["results"]["floor"]["rows"]
    assert set(data["ratios"]) >= {"datarax / grain tokens/s", "datarax / floor efficiency"}
    # the read-ahead and the consumer's-thread packing side by side, with train steps
    assert set(data["overlap"]) == {"train_s_per_batch", "datarax", "datarax-prefetch0"}
    assert all(0.0 <= data["overlap"][n]["hidden"] <= 1.0 for n in ("datarax", "datarax-prefetch0"))
