"""``benchmarks/warm_first_cpu.py`` at a tiny size: both trees serve the same first batch,
and every timed run is a second run (its step loaded from the store, none compiled)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fresh_process import ROOT, benchmark_env


# six fresh processes (~20 s): in the slow run
@pytest.mark.slow
def test_w10_tiny_two_trees_one_batch_each_timed_run_loaded(tmp_path):
    out = tmp_path / "result.json"
    env = benchmark_env()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.warm_first_cpu", "--workload", "W10", "--rounds",
         "2", "--records", "600", "--before", str(ROOT / "src"), "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert sorted(result["medians"]) == ["after", "before"]
    assert result["digests"]["after"] == result["digests"]["before"]
    assert len(result["digests"]["after"]) == 1
    for runs in result["runs"].values():
        assert len(runs) == 2
        for run in runs:
            assert run["counts"]["loaded"] == 1 and run["counts"]["compiled"] == 0
            assert run["total_cpu"] >= run["first_next_cpu"] > 0
            # every thread's CPU, the main thread's among them; the wall beside it
            assert run["total_process_cpu"] >= run["total_cpu"] and run["total_wall"] > 0
