"""One process of the two-process localhost test (run by test_multihost.py).

Usage: python multihost_worker.py PORT PROCESS_ID OUT_JSON [ARRAYRECORD_GLOB]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_num_cpu_devices", 2)

NUM_RECORDS, BATCH = 24, 4


def main() -> None:
    port, process_id, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=60,
    )
    import numpy as np
    from jax.experimental import multihost_utils

    from datarax.sharding import data_mesh, global_batch
    from datarax.testing import check_resume_exact, collect
    from reliability_sources import make_memory_pipeline

    def make():  # shard defaults to jax.process_index() / jax.process_count()
        return make_memory_pipeline(
            NUM_RECORDS, BATCH, shuffle=True, stochastic=True, drop_remainder=True
        )

    out: dict = {"process_index": jax.process_index(), "process_count": jax.process_count()}
    share = make().source.shard
    out["shard"] = [share.index, share.count]
    epochs = collect(make(), 2)
    out["epochs"] = [
        {
            "epoch": e,
            "x": (b["x"] // 2).tolist(),
            "noise": b["noise"].tolist(),
        }
        for e, b in epochs
    ]
    # Exact resume of this process's share, via JSON, at several points.
    report = check_resume_exact(make, [1, 3, 3, 5], num_epochs=2)
    out["resume_batches"] = report.num_batches
    # Global batches over a 1-D mesh of both processes' CPU devices.
    mesh = data_mesh()
    out["mesh_devices"] = int(mesh.devices.size)
    total = jax.jit(lambda v: v.sum())
    gathered = []
    for e, local in epochs:
        if e != 0:
            break
        g = global_batch(local, mesh)
        out.setdefault("global_shapes", []).append(list(g["x"].shape))
        out.setdefault("global_sums", []).append(int(total(g["x"])))
        full = multihost_utils.process_allgather(g["x"], tiled=True)
        gathered.append((np.asarray(full) // 2).tolist())
    out["gathered"] = gathered
    # A forward-only stream: every process keeps every 2nd record, in whole rounds.
    from flax import nnx

    from datarax.pipeline import Pipeline
    from reliability_sources import CountingStream, CountingStreamConfig, stages

    def make_stream():
        return Pipeline(source=CountingStream(CountingStreamConfig(num_records=21, seed=4)),
                        stages=stages(True), batch_size=4, rngs=nnx.Rngs(0))

    out["stream_ids"] = [b["id"].tolist() for _, b in collect(make_stream(), 1)]
    out["stream_resume_batches"] = check_resume_exact(make_stream, [1, 2, 2], num_epochs=2).num_batches
    if len(sys.argv) > 4:  # an ArrayRecord source, sharded by process the same way
        from reliability_arrayrecord import close_source, make_arrayrecord_pipeline

        def make_ar():
            return make_arrayrecord_pipeline(
                sys.argv[4], 3, shuffle=True, drop_remainder=True, bad=frozenset({7}),
                shard_index=None, shard_count=None,
            )

        ar = make_ar()
        out["ar_shard"] = [ar.source.shard.index, ar.source.shard.count]
        out["ar_epochs"] = [
            {"epoch": e, "id": b["id"].tolist(), "noise": b["noise"].tolist()}
            for e, b in collect(ar, 2)
        ]
        close_source(ar)
        out["ar_resume_batches"] = check_resume_exact(
            make_ar, [1, 2, 2, 4], num_epochs=2, close=close_source
        ).num_batches
    Path(out_path).write_text(json.dumps(out))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
