"""Child process of the SIGKILL test (run by test_process_kill.py).

Usage: python kill_worker.py (run|resume) KIND CKPT_JSON LOG_FILE READY_FILE

``run`` iterates one epoch, logging each batch's record ids to LOG_FILE (one line per
batch, fsynced) and writing the pipeline state to CKPT_JSON (atomically) after batch
CHECKPOINT_AT; two batches later it creates READY_FILE and waits to be killed.
``resume`` restores CKPT_JSON into a freshly built pipeline and finishes the epoch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, str(Path(__file__).resolve().parent))

CHECKPOINT_AT = 3


def make(kind: str):
    from flax import nnx

    from datarax.pipeline import Pipeline
    from reliability_sources import CountingStream, CountingStreamConfig, make_memory_pipeline, stages

    if kind == "memory":
        return make_memory_pipeline(23, 3, shuffle=True, stochastic=True, shard_index=0, shard_count=1)
    if kind == "stream":
        return Pipeline(
            source=CountingStream(CountingStreamConfig(num_records=23, seed=1)),
            stages=stages(True), batch_size=3, rngs=nnx.Rngs(0), shard_index=0, shard_count=1,
        )
    if kind.startswith("arrayrecord:"):
        from reliability_arrayrecord import make_arrayrecord_pipeline

        return make_arrayrecord_pipeline(kind.split(":", 1)[1], 3, shuffle=True, bad=frozenset({4, 17}))
    raise SystemExit(f"unknown kind {kind}")


def ids(batch) -> list:
    import numpy as np

    key = "id" if "id" in batch else "x"
    noise = np.asarray(batch["noise"]).round(6).tolist() if "noise" in batch else []
    return [np.asarray(batch[key]).tolist(), noise]


def main() -> None:
    mode, kind, ckpt, log, ready = sys.argv[1:6]
    pipeline = make(kind)
    with open(log, "a") as out:
        def record(batch) -> None:
            out.write(json.dumps(ids(batch)) + "\n")
            out.flush()
            os.fsync(out.fileno())

        if mode == "resume":
            pipeline.set_state(json.loads(Path(ckpt).read_text()))
            for batch in pipeline:
                record(batch)
            return
        iterator = iter(pipeline)
        for step, batch in enumerate(iterator, start=1):
            record(batch)
            if step == CHECKPOINT_AT:
                tmp = Path(ckpt + ".tmp")
                tmp.write_text(json.dumps({**iterator.get_state(), "logged_batches": step}))
                os.replace(tmp, ckpt)
            if step == CHECKPOINT_AT + 2:
                Path(ready).touch()
                time.sleep(600)  # killed here, mid-epoch, after the checkpoint
        raise SystemExit("epoch ended before the kill")


if __name__ == "__main__":
    main()
