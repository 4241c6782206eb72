"""The dispatch-ahead harness: every variant serves W1's batches, the worker, the loop's
thread and ``prefetch=0`` the same ones, and the report has a ratio per variant and
batch. No timing asserts."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_ahead_ab as A  # noqa: E402
from datarax.pipeline import driver_compiled  # noqa: E402


def test_variants_serve_the_same_batches_and_each_gets_a_ratio():
    report = A.run(records=256, batches=(64,), steps=2, rounds=1)
    assert report["64_same_batches"] is True
    assert sorted(report["64"]["plain_jit_over_variant"]) == sorted(
        ["for_worker", "step_worker", "for_loop", "step_loop", "for_prefetch0"])
    assert driver_compiled.WORKER_BACKENDS == frozenset({"cpu"})  # put back
