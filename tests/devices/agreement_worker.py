"""One of two JAX processes (1 CPU device each) for test_processes_agree.py: builds
``Pipeline(sharding=...)`` over the 2-device mesh with a setting that differs on
process 1 (or none), and writes what each build did (and, built alike, what its
``scan`` does); then process 1 exits and process 0 builds once more.

Usage: python agreement_worker.py PORT PROCESS_ID OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ.pop("XLA_FLAGS", None)

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_num_cpu_devices", 1)

# case: the settings process 1 builds with (process 0 builds the first case's)
CASES = {
    "same": {"batch_size": 2, "seed": 5, "records": 12},
    "batch_size": {"batch_size": 4, "seed": 5, "records": 12},
    "seed": {"batch_size": 2, "seed": 6, "records": 12},
    "records": {"batch_size": 2, "seed": 5, "records": 14},
    # refused on process 1 alone (no record in its share): process 0 must not wait for it
    "refused": {"batch_size": 2, "seed": 5, "records": 1},
}


def main() -> None:
    port, process_id, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=60)
    import numpy as np
    from jax.experimental.multihost_utils import process_allgather
    from jax.sharding import NamedSharding, PartitionSpec

    from datarax.pipeline import Pipeline
    from datarax.sharding import data_mesh
    from datarax.sources import MemorySource, MemorySourceConfig

    sharding = NamedSharding(data_mesh(), PartitionSpec("data"))
    out = {}
    for case, mine in CASES.items():
        used = mine if process_id == 1 else CASES["same"]
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=used["seed"]),
                              {"x": np.arange(used["records"], dtype=np.int32)})
        try:
            pipeline = Pipeline(source=source, batch_size=used["batch_size"],
                                drop_remainder=True, sharding=sharding)
        except Exception as err:  # noqa: BLE001 - the test reads what was raised
            out[case] = f"{type(err).__name__}: {err}"
            continue
        out[case] = [np.asarray(process_allgather(b["x"], tiled=True)).tolist()
                     for b in pipeline]
        try:  # the fused scan does not assemble global batches over processes
            pipeline.scan(lambda batch: batch["x"].sum(), length=1)
            out[f"{case} scan"] = "ran"
        except Exception as err:  # noqa: BLE001 - the test reads what was raised
            out[f"{case} scan"] = f"{type(err).__name__}: {err}"
    if process_id == 1:  # then gone, as a process that died: process 0 must not wait
        Path(out_path).write_text(json.dumps(out))
        os._exit(0)
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                          {"x": np.arange(12, dtype=np.int32)})
    try:
        Pipeline(source=source, batch_size=2, drop_remainder=True, sharding=sharding)
    except Exception as err:  # noqa: BLE001 - the test reads what was raised
        out["peer gone"] = f"{type(err).__name__}: {err}"
    Path(out_path).write_text(json.dumps(out))
    os._exit(0)  # jax.distributed.shutdown would wait for process 1


if __name__ == "__main__":
    main()
