"""The steady loop's cost per batch: W1 or W10's second epoch, split by thread.

``python -m benchmarks.steady_loop [--workload w1|w10] [--records N] [--profile 1]
[--json out.json]``

W1 (``MemorySource`` shuffled, ``/255`` and a random flip per record, batch 256) or
W10 (W1 behind a ``FilterOperator`` keeping even labels) through the public API, each
batch consumed as the benchmarks do (``np.asarray`` of its fields). Epoch 1 (compile,
first batch) and epoch 3 are hashed (sha256 of every batch: compare two trees' runs);
epoch 2 is timed unhashed: wall, this process's CPU, the loop thread's own CPU (the
``for`` loop, ``next()`` and ``np.asarray``: the rest of the process's CPU is the
read-ahead worker's and XLA's) and the minor page faults, each per batch.
``--profile 1`` adds cProfile's top functions (own time per batch; a wait for the
other thread shows as ``acquire``/``get``) of the loop thread over epoch 2 and of every
thread started after the pipeline was built (the read-ahead worker) over all three;
its timings then include the profiler's cost.
"""

from __future__ import annotations

import cProfile
import hashlib
import io
import pstats
import resource
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit, parser

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def _flip(element: Any, key: Any) -> dict[str, Any]:
    image = element.data["image"]
    return {"image": jnp.where(jax.random.bernoulli(key), image[:, ::-1, :], image)}


def build(workload: str, records: int, batch_size: int = 256, seed: int = 0) -> Pipeline:
    """W1's or W10's pipeline over ``records`` random 32x32x3 images."""
    rng = np.random.default_rng(seed)
    data = {"image": rng.integers(0, 256, (records, 32, 32, 3), dtype=np.uint8),
            "label": rng.integers(0, 10, (records,), dtype=np.int32)}
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=seed), data)
    stages: list[Any] = [
        ElementOperator(fn=lambda el, key=None: {"image": el.data["image"] / 255.0}),
        ElementOperator(fn=_flip, stochastic=True)]
    if workload == "w10":
        stages.insert(0, FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0))
    return Pipeline(source, stages=stages, batch_size=batch_size, seed=seed)


def epoch(pipeline: Pipeline, digest: Any = None) -> tuple[int, int]:
    """One pass, each batch's fields taken to NumPy (and hashed into ``digest``):
    ``(batches, records)``."""
    batches = records = 0
    for batch in pipeline:
        image, label = np.asarray(batch["image"]), np.asarray(batch["label"])
        if digest is not None:
            digest.update(image.tobytes())
            digest.update(label.tobytes())
        batches += 1
        records += len(label)
    return batches, records


def _top(profile: cProfile.Profile, batches: int, lines: int = 15) -> list[str]:
    """The ``lines`` functions of most own time, in microseconds per batch."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:lines]  # type: ignore[attr-defined]
    return [f"{1e6 * tt / batches:8.1f} us/batch own, {1e6 * ct / batches:8.1f} cum, "
            f"{nc / batches:5.1f} calls/batch  {fn[0].rsplit('/', 1)[-1]}:{fn[1]}({fn[2]})"
            for fn, (_cc, nc, tt, ct, _callers) in rows]


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, "json", workload="w1", records=50_000, profile=0).parse_args(argv)
    pipeline = build(args.workload, args.records)
    worker_profiles: list[cProfile.Profile] = []
    if args.profile:
        def start_profile(*_: Any) -> None:  # the first event of a new thread
            profile = cProfile.Profile()
            worker_profiles.append(profile)
            profile.enable()  # replaces this hook for the thread
        threading.setprofile(start_profile)
    first = hashlib.sha256()
    epoch(pipeline, first)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    loop_profile = cProfile.Profile()
    if args.profile:
        loop_profile.enable()
    batches, served = epoch(pipeline)
    loop_profile.disable()
    own = time.thread_time() - own
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    third = hashlib.sha256()
    epoch(pipeline, third)
    result: dict[str, Any] = {
        "workload": args.workload, "records": args.records, "batches": batches,
        "records_per_epoch": served,
        "wall_ms_per_batch": round(1e3 * wall / batches, 4),
        "cpu_ms_per_batch": round(1e3 * cpu / batches, 4),
        "loop_thread_cpu_ms_per_batch": round(1e3 * own / batches, 4),
        "minor_faults_per_batch": round(faults / batches, 1),
        "records_per_second": round(served / wall),
        "sha256_epoch1": first.hexdigest(), "sha256_epoch3": third.hexdigest(),
    }
    if args.profile:
        threading.setprofile(None)  # type: ignore[arg-type]
        time.sleep(1.5)  # the worker parks, then ends: its profile is complete
        result["loop_thread_epoch_2"] = _top(loop_profile, batches)
        result["other_threads_all_epochs"] = [_top(p, 3 * batches) for p in worker_profiles]
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
