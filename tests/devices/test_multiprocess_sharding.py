"""``Pipeline(sharding=...)`` under real JAX processes on localhost (8 CPU devices in
all): each process contributes its share, the global batch is the shares in process
order. Two processes of 4 devices, and four of 2 (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jax_processes import run_jax_processes

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_processes_contribute_their_shares_to_one_global_batch(tmp_path, processes):
    results = run_jax_processes(
        HERE / "multiprocess_worker.py", processes, tmp_path,
        lambda port, i, out: [str(port), str(i), str(processes), str(out)], timeout=180)
    assert [r["process_index"] for r in results] == list(range(processes))
    assert all(r["devices"] == 8 for r in results)
    for r in results:
        for kind in ("indexed", "host"):
            checks = r[kind]
            assert len(checks) == 2  # 20 records per process, batches of 8, drop remainder
            for c in checks:
                assert c["global_shape"] == [8 * processes]
                assert c["equal"] and c["sharding_ok"]
                assert c["local_shards"] == 8 // processes
                # this process's devices hold exactly its own 8 rows
                # (8 / devices per device; the first of every pair compared)
                assert c["local_rows"] == c["own_rows"]
    for r in results:  # Rebatch of a sharded pipeline: refused, naming the way that works
        assert (f"Rebatch(split=2) of a Pipeline with sharding= under {processes} processes"
                in r["rebatch"]["refused"])
        assert "global_batches(Rebatch(pipeline, split=2), mesh)" in r["rebatch"]["refused"]
        assert r["rebatch"]["equal"] and r["rebatch"]["sharded"]
