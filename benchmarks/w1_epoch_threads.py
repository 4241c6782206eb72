"""Where W1's warm whole epoch goes, per thread: CPU seconds of every thread and the main
thread's phases, in fresh processes.

``python -m benchmarks.w1_epoch_threads [--rounds 4] [--records 50000] [--json PATH]``

Each run is a fresh process (``--worker``) that imports JAX and datarax, makes the data
(not counted), then does what ``benchmarks/run.py --workloads W1`` times for datarax: builds
the ``MemorySource`` and the ``Pipeline`` (default options: compile-ahead and the dispatch
worker on), and takes every batch of one epoch, blocking on each. The compiled-step store
is filled by one untimed run first, so every timed run is a user's second run.

Reported per run: the main thread's wall and CPU seconds (``time.thread_time``) for
``MemorySource()``, ``Pipeline()``, the first ``next()`` and the rest of the epoch; the
process's CPU seconds; and each thread's CPU seconds over the epoch from
``/proc/self/task/*/schedstat`` (nanoseconds run), by name: threads that end inside the
epoch are read at the end of their ``run`` (a wrapper on ``threading.Thread.run``), XLA's
own threads by their kernel name. The load average comes with each run. ``--as-suite``:
as ``benchmarks/worker.py`` does, JAX's CPU client starts inside the timed part and each
batch is digested on the main thread (its CPU: ``consumer_cpu``). ``rest_minor_faults``:
the process's minor page faults after the first batch.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import emit, run_worker, thread_cpu, worker_env


def worker(records: int, as_suite: bool) -> dict[str, Any]:
    import jax
    import numpy as np

    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    from benchmarks.contenders.datarax_pipeline import w1_stages
    from benchmarks.vision_data import digest, make_data

    ended: dict[int, tuple[str, float]] = {}
    original_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        try:
            original_run(self)
        finally:
            with open("/proc/thread-self/schedstat") as f:
                ended[threading.get_native_id()] = (self.name, int(f.read().split()[0]) / 1e9)

    threading.Thread.run = run  # type: ignore[method-assign]
    images, labels = make_data(records, 0)
    if not as_suite:
        jax.devices()  # the CPU client's start, left out
    consumer = 0.0
    before = thread_cpu()
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    marks = [(time.perf_counter(), time.thread_time())]
    snapshots = [before]
    process_began = time.process_time()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": labels})
    snapshots.append(thread_cpu())
    marks.append((time.perf_counter(), time.thread_time()))
    pipeline = Pipeline(source, stages=w1_stages(), batch_size=256, seed=0)
    snapshots.append(thread_cpu())
    marks.append((time.perf_counter(), time.thread_time()))
    batches = iter(pipeline)
    batch = jax.block_until_ready(next(batches))
    if as_suite:
        began = time.thread_time()
        digest(np.asarray(batch["image"])), np.array(batch["label"], copy=True)
        consumer += time.thread_time() - began
    snapshots.append(thread_cpu())
    marks.append((time.perf_counter(), time.thread_time()))
    count, faults = 1, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for batch in batches:
        jax.block_until_ready(batch)
        if as_suite:
            began = time.thread_time()
            digest(np.asarray(batch["image"])), np.array(batch["label"], copy=True)
            consumer += time.thread_time() - began
        count += 1
    marks.append((time.perf_counter(), time.thread_time()))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    process_cpu = time.process_time() - process_began
    after = thread_cpu()
    snapshots.append(after)
    python_names.update({t.native_id: t.name for t in threading.enumerate()})
    per_thread: dict[str, float] = defaultdict(float)
    main_tid = threading.main_thread().native_id
    for tid, (kernel_name, ran) in {**before, **after, **ended}.items():
        name = "main" if tid == main_tid else python_names.get(tid, f"{kernel_name} (native)")
        if tid in ended:
            name = ended[tid][0]
        per_thread[name] += ran - before.get(tid, ("", 0.0))[1]
    phases = ("source", "pipeline", "first_next", "rest")
    by_phase: dict[str, dict[str, float]] = {}
    for i, phase in enumerate(phases):
        for tid, (kernel_name, ran) in snapshots[i + 1].items():
            name = "main" if tid == main_tid else python_names.get(tid, f"{kernel_name} (native)")
            spent = ran - snapshots[i].get(tid, ("", 0.0))[1]
            if spent > 0.0005:
                by_phase.setdefault(name, {})[phase] = round(
                    by_phase.get(name, {}).get(phase, 0.0) + spent, 4)
    return {"batches": count, "consumer_cpu": consumer,
            "rest_minor_faults": faults, "wall": marks[-1][0] - marks[0][0],
            "process_cpu": process_cpu,
            **{f"{p}_wall": marks[i + 1][0] - marks[i][0] for i, p in enumerate(phases)},
            **{f"{p}_cpu": marks[i + 1][1] - marks[i][1] for i, p in enumerate(phases)},
            "threads": {k: round(v, 4) for k, v in sorted(per_thread.items()) if v > 0.0005},
            "by_phase": by_phase, "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--rounds", type=int, default=4)
    options.add_argument("--records", type=int, default=50_000)
    options.add_argument("--as-suite", action="store_true",
                         help="as benchmarks/run.py's worker: the CPU client starts inside "
                              "the timed part, and each batch is digested (the consumer)")
    options.add_argument("--json")
    options.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options.add_argument("--out", help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.records, args.as_suite)))
        return
    with tempfile.TemporaryDirectory(prefix="datarax-w1-threads-") as scratch:
        env = worker_env({"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
                          "DATARAX_COMPILE_CACHE_DIR": scratch})
        command = ["--worker", "--records", str(args.records)] + (
            ["--as-suite"] if args.as_suite else [])
        run_worker("benchmarks.w1_epoch_threads", command, env, timeout=900, check=True)
        rows = [run_worker("benchmarks.w1_epoch_threads", command, env, timeout=900,
                           check=True) for _ in range(args.rounds)]
    scalars = [k for k, v in rows[0].items() if isinstance(v, float)]
    names = sorted({n for r in rows for n in r["threads"]})
    emit({"records": args.records, "rounds": args.rounds, "as_suite": args.as_suite,
          "medians": {k: round(statistics.median(r[k] for r in rows), 4) for k in scalars},
          "thread_medians": {n: round(statistics.median(r["threads"].get(n, 0.0) for r in rows), 4)
                             for n in names},
          "runs": rows}, args.json)


if __name__ == "__main__":
    main()
