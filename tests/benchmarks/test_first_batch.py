"""``benchmarks/first_batch.py`` at a tiny size: every case runs in its own process, the
warm process loads what the cold one stored, and every datarax case serves the same
first batch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fresh_process import ROOT, benchmark_env


# four fresh processes (~20 s): in the slow run
@pytest.mark.slow
def test_w1_tiny_cold_and_warm_serve_one_batch_the_warm_one_loaded(tmp_path):
    out = tmp_path / "rows.json"
    env = benchmark_env()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_batch", "--workloads", "W1", "--repeats", "1",
         "--sleep", "0.1", "--records", "300", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    cases = [(r["case"], r["sleep"]) for r in rows]
    assert cases == [(c, s) for s in (0.0, 0.1)
                     for c in ("jax.jit", "datarax cold", "datarax warm", "datarax, no ahead")]
    datarax = [r for r in rows if r["case"] != "jax.jit"]
    assert len({r["sha256"] for r in datarax}) == 1
    for row in datarax:
        counts = row["counts"]
        if row["case"] == "datarax cold":
            assert counts["compiled"] == counts["stored"] == 1 and counts["loaded"] == 0
        elif row["case"] == "datarax warm":
            assert counts["loaded"] == 1 and counts["compiled"] == 0
        else:  # no ahead, store off
            assert counts["compiled"] == 1 and counts["stored"] == counts["loaded"] == 0
    assert "| W1 | datarax warm |" in done.stdout


# three fresh processes at a tiny size: in the slow run
@pytest.mark.slow
def test_phases_tiny_the_warm_process_loads_and_every_phase_is_reported(tmp_path):
    out = tmp_path / "rows.json"
    env = {**benchmark_env(), "FIRST_BATCH_RECORDS": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_batch_phases", "--workloads", "W10",
         "--repeats", "1", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["case"]: r for r in json.loads(out.read_text())}
    assert sorted(rows) == ["cold", "jax.jit", "warm"]
    assert rows["cold"]["counts"]["compiled"] == 1 and rows["warm"]["counts"]["loaded"] == 1
    assert rows["cold"]["sha256"] == rows["warm"]["sha256"]
    assert rows["cold"]["first_next_phases"]["compile"] > 0
    assert "compile" not in rows["warm"]["first_next_phases"]
    assert "| W10 | warm |" in done.stdout
