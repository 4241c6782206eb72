"""The steady-loop harness: its epochs serve every record (W1) or the kept ones (W10),
and its digests are those of the same pipeline's epochs 1 and 3. No timing asserts."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import steady_loop as S  # noqa: E402


def test_w10_serves_the_kept_records_and_its_digests_are_the_pipelines(tmp_path, capsys):
    out = tmp_path / "steady.json"
    assert S.main(["--workload", "w10", "--records", "600", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rng = np.random.default_rng(0)  # the script's data: images, then labels
    rng.integers(0, 256, (600, 32, 32, 3), dtype=np.uint8)
    kept = int((rng.integers(0, 10, (600,), dtype=np.int32) % 2 == 0).sum())
    assert report["records_per_epoch"] == kept and report["batches"] == -(-kept // 256)
    pipeline = S.build("w10", 600)
    digests = []
    for _ in range(3):
        digest = hashlib.sha256()
        S.epoch(pipeline, digest)
        digests.append(digest.hexdigest())
    assert [report["sha256_epoch1"], report["sha256_epoch3"]] == [digests[0], digests[2]]
    assert digests[0] != digests[2]  # another epoch, another order
