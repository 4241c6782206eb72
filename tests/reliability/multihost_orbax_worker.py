"""One process of the two-process Orbax test (run by test_multihost.py).

Usage: python multihost_orbax_worker.py PORT PROCESS_ID OUT_JSON CHECKPOINT_DIR PHASE

PHASE ``save``: serve two batches, save the data state with ``datarax.checkpoint.save``
(Orbax writes it from process 0 only), record the rest of the epoch. PHASE
``restore``: a new run restores that step and records what it serves.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_num_cpu_devices", 1)


def main() -> None:
    port, process_id, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    directory, phase = sys.argv[4], sys.argv[5]
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=60,
    )
    import numpy as np
    from flax import nnx

    import datarax.checkpoint
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(24, dtype=np.int32)})
    pipeline = Pipeline(source=source, batch_size=3, drop_remainder=True, rngs=nnx.Rngs(0))
    out: dict = {"shard": [pipeline.source.shard.index, pipeline.source.shard.count]}
    with datarax.checkpoint.checkpoint_manager(directory) as checkpoints:
        if phase == "save":
            iterator = iter(pipeline)
            out["served"] = [np.asarray(next(iterator)["x"]).tolist() for _ in range(2)]
            datarax.checkpoint.save(checkpoints, 2, pipeline)
            checkpoints.wait_until_finished()
            out["rest"] = [np.asarray(b["x"]).tolist() for b in iterator]
        else:
            datarax.checkpoint.restore(checkpoints, 2, pipeline)
            out["rest"] = [np.asarray(b["x"]).tolist() for b in pipeline]
    Path(out_path).write_text(json.dumps(out))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
