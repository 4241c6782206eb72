"""``Pipeline(sharding=...)`` under two real JAX processes (4 CPU devices each): each
process contributes its share, the global batch is both shares in process order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import portpicker

HERE = Path(__file__).resolve().parent


def test_two_processes_contribute_their_shares_to_one_global_batch(tmp_path):
    port = portpicker.pick_unused_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen([sys.executable, str(HERE / "multiprocess_worker.py"), str(port), str(i),
                          str(tmp_path / f"p{i}.json")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    logs = []
    try:
        logs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} failed:\n{logs[i][-3000:]}"
    results = [json.loads((tmp_path / f"p{i}.json").read_text()) for i in range(2)]
    assert [r["process_index"] for r in results] == [0, 1]
    assert all(r["devices"] == 8 for r in results)
    for r in results:
        for kind in ("indexed", "host"):
            checks = r[kind]
            assert len(checks) == 2  # 20 records per process, batches of 8, drop remainder
            for c in checks:
                assert c["global_shape"] == [16]
                assert c["equal"] and c["sharding_ok"]
                assert c["local_shards"] == 4
                # this process's 4 devices hold exactly its own 8 rows (2 per device)
                assert c["local_rows"] == c["own_rows"]
