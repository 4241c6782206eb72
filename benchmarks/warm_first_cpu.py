"""A second run's first batch (W1 or W10) on one thread, as CPU seconds: two datarax trees
alternating in fresh processes.

``python -m benchmarks.warm_first_cpu --workload W10 --before /work/main/src [--rounds 8]
[--records 50000] [--json PATH]``

Each run is a fresh process (``--worker``) that imports JAX and datarax, makes the data
(not counted), then on its main thread builds the ``MemorySource``, the ``Pipeline``
(``prefetch=0``, ``DATARAX_COMPILE_AHEAD=0``: the trace, lowering, store key, load and
first run of the step all happen inside the first ``next()``, on the main thread) and
takes the first batch. Reported: the main thread's CPU seconds (``time.thread_time``) of
each of the three; of the whole, the wall seconds and the process's CPU seconds (every
thread: work moved to a helper thread shows there, not in the main thread's); the store's
counts (a timed run loads its step: ``loaded`` 1), a digest of the batch, the load. Each
tree has its own compiled-step store, filled by one untimed run first (every timed run is
a user's second run). The trees run in turn, every other round in reverse order, so that
load drifts reach both; CPU seconds move far less with the load of a shared machine than
wall seconds (the copy's second half runs on a helper thread: not counted in the main
thread's, the same in both trees).

W1: 32x32x3 images, ``/255`` then a random flip per record, batch 256, shuffled. W10: W1
with a ``FilterOperator`` keeping the even labels (half) as its first stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, emit, run_worker, worker_env

PARTS = ("source_cpu", "build_cpu", "first_next_cpu", "total_cpu", "total_wall",
         "total_process_cpu")


def worker(workload: str, records: int) -> dict[str, Any]:
    import jax
    import numpy as np

    from datarax.core import compiled_store
    from datarax.operators import FilterOperator
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    from benchmarks.contenders.datarax_pipeline import w1_stages
    from benchmarks.vision_data import make_data

    images, labels = make_data(records, 0)
    jax.devices()
    began, began_wall, began_process = time.thread_time(), time.perf_counter(), time.process_time()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": labels})
    built_source = time.thread_time()
    stages = w1_stages()
    if workload == "W10":
        stages.insert(0, FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0))
    pipeline = Pipeline(source, stages=stages, batch_size=256, seed=0, prefetch=0)
    built = time.thread_time()
    batch = jax.block_until_ready(next(iter(pipeline)))
    done, done_wall, done_process = time.thread_time(), time.perf_counter(), time.process_time()
    return {"total_wall": done_wall - began_wall, "total_process_cpu": done_process - began_process,
            "source_cpu": built_source - began, "build_cpu": built - built_source,
            "first_next_cpu": done - built, "total_cpu": done - began,
            "counts": compiled_store.counts(),
            "sha256": hashlib.sha256(np.asarray(batch["image"]).tobytes()).hexdigest()[:16],
            "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--workload", choices=("W1", "W10"), default="W10")
    options.add_argument("--before", required=False, help="the other datarax source tree")
    options.add_argument("--rounds", type=int, default=8)
    options.add_argument("--records", type=int, default=50_000)
    options.add_argument("--json")
    options.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options.add_argument("--out", help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.workload, args.records)))
        return
    trees = {"after": str(ROOT / "src")}
    if args.before:
        trees = {"before": args.before, **trees}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="datarax-warm-cpu-") as scratch:
        def run(name: str) -> dict[str, Any]:
            env = worker_env({"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
                              "DATARAX_COMPILE_AHEAD": "0",
                              "DATARAX_COMPILE_CACHE_DIR": os.path.join(scratch, name)},
                             src=trees[name])
            return run_worker("benchmarks.warm_first_cpu",
                              ["--worker", "--workload", args.workload,
                               "--records", str(args.records)], env, timeout=900, check=True)

        for name in trees:
            run(name)  # untimed: fills this tree's store
        for round_ in range(args.rounds):
            for name in list(trees) if round_ % 2 == 0 else list(trees)[::-1]:
                rows[name].append(run(name))
    medians = {name: {part: round(statistics.median(r[part] for r in rows[name]), 4)
                      for part in PARTS} for name in trees}
    emit({"workload": args.workload, "records": args.records, "rounds": args.rounds,
          "trees": trees, "medians": medians,
          "digests": {name: sorted({r["sha256"] for r in rows[name]}) for name in trees},
          "runs": rows}, args.json)


if __name__ == "__main__":
    main()
