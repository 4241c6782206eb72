"""One process of the two-process Orbax test (run by test_multihost.py).

Usage: python multihost_orbax_worker.py PORT PROCESS_ID OUT_JSON CHECKPOINT_DIR PHASE [AR_GLOB]

For each pipeline (in-memory; a forward-only stream; ArrayRecord skipping a bad
record, given its files): PHASE ``save`` serves two batches, saves the data state with
``datarax.checkpoint.save`` and records the rest of the epoch; PHASE ``restore`` (a new
run) restores that step and records what it serves.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
    from reliability_sources import CountingStream, CountingStreamConfig

    def memory():
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                              {"x": np.arange(24, dtype=np.int32)})
        return Pipeline(source=source, batch_size=3, drop_remainder=True, rngs=nnx.Rngs(0))

    def stream():
        return Pipeline(source=CountingStream(CountingStreamConfig(num_records=21, seed=4)),
                        batch_size=3, rngs=nnx.Rngs(0))

    makers = {"memory": (memory, "x"), "stream": (stream, "id")}
    if len(sys.argv) > 6:
        from reliability_arrayrecord import make_arrayrecord_pipeline

        def arrayrecord():  # record 7 is bad and skipped: the shares' positions differ
            return make_arrayrecord_pipeline(sys.argv[6], 3, shuffle=True, bad=frozenset({7}),
                                             shard_index=None, shard_count=None)

        makers["arrayrecord"] = (arrayrecord, "id")
    out: dict = {}
    for name, (make, field) in makers.items():
        pipeline = make()
        result = out[name] = {
            "shard": [pipeline.source.shard.index, pipeline.source.shard.count]
        }
        with datarax.checkpoint.checkpoint_manager(f"{directory}/{name}") as checkpoints:
            if phase == "save":
                iterator = iter(pipeline)
                result["served"] = [np.asarray(next(iterator)[field]).tolist() for _ in range(2)]
                result["position"] = pipeline.get_state()["position"]
                datarax.checkpoint.save(checkpoints, 2, pipeline)
                checkpoints.wait_until_finished()
                result["rest"] = [np.asarray(b[field]).tolist() for b in iterator]
            else:
                datarax.checkpoint.restore(checkpoints, 2, pipeline)
                result["rest"] = [np.asarray(b[field]).tolist() for b in pipeline]
        pipeline.source.close()
    Path(out_path).write_text(json.dumps(out))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
