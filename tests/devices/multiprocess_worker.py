"""One of PROCESSES JAX processes (8 / PROCESSES CPU devices each) for
test_multiprocess_sharding.py.

Usage: python multiprocess_worker.py PORT PROCESS_ID PROCESSES OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ.pop("XLA_FLAGS", None)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
PROCESSES = int(sys.argv[3])
jax.config.update("jax_num_cpu_devices", 8 // PROCESSES)


def main() -> None:
    port, process_id, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=PROCESSES,
                               process_id=process_id, initialization_timeout=60)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from devices_sources import host, make_pipeline

    mesh = Mesh(np.asarray(jax.devices()), ("data",))  # 8 devices, both processes
    sharding = NamedSharding(mesh, P("data"))
    out: dict = {"process_index": jax.process_index(), "devices": jax.device_count()}
    for kind in ("indexed", "host"):
        # this process's shard by default (jax.process_index() of PROCESSES), on the mesh
        placed = list(make_pipeline(kind, 20 * PROCESSES, 8, shuffle=True, drop_remainder=True,
                                    sharding=sharding))
        shares = [
            [host(b) for b in make_pipeline(kind, 20 * PROCESSES, 8, shuffle=True,
                                            drop_remainder=True, shard_index=i,
                                            shard_count=PROCESSES)]
            for i in range(PROCESSES)
        ]
        checks = []
        for step, batch in enumerate(placed):
            whole = multihost_utils.process_allgather(batch["x"], tiled=True)
            want = np.concatenate([share[step]["x"] for share in shares])
            local_rows = sorted(int(v) for s in batch["x"].addressable_shards
                                for v in np.asarray(s.data)[::2])
            checks.append({
                "global_shape": list(batch["x"].shape),
                "equal": bool(np.array_equal(np.asarray(whole), want)),
                "sharding_ok": batch["x"].sharding == sharding,
                "local_shards": len(batch["x"].addressable_shards),
                "local_rows": local_rows,
                "own_rows": sorted(int(v) for v in shares[process_id][step]["x"][::2]),
            })
        out[kind] = checks
    out["rebatch"] = rebatch_checks(mesh, sharding)
    Path(out_path).write_text(json.dumps(out))
    jax.distributed.shutdown()


def rebatch_checks(mesh, sharding) -> dict:
    """Rebatch of a sharded pipeline is refused; the way its message names (rebatch the
    plain pipeline, then place with global_batches) gives halves of every share."""
    import numpy as np

    from datarax.core.errors import ConfigError
    from datarax.pipeline.rebatch import Rebatch
    from datarax.sharding import global_batches
    from devices_sources import host, make_pipeline

    n = 16 * PROCESSES
    try:
        Rebatch(make_pipeline("indexed", n, 8, sharding=sharding), split=2)
        refused = ""
    except ConfigError as err:
        refused = str(err)
    halves = list(global_batches(Rebatch(make_pipeline("indexed", n, 8), split=2), mesh))
    shares = [[host(b)["x"] for b in make_pipeline("indexed", n, 8, shard_index=i,
                                                   shard_count=PROCESSES)]
              for i in range(PROCESSES)]
    from jax.experimental import multihost_utils
    got = [np.asarray(multihost_utils.process_allgather(b["x"], tiled=True)).tolist()
           for b in halves]
    want = [np.concatenate([share[step // 2][4 * (step % 2):4 * (step % 2) + 4]
                            for share in shares]).tolist() for step in range(4)]
    return {"refused": refused, "equal": got == want, "sharded": all(
        b["x"].sharding == sharding for b in halves)}


if __name__ == "__main__":
    main()
