"""One contender, one epoch, in a fresh process: ``python -m benchmarks.worker ...``.

The parent passes its wall-clock time at spawn (``--spawn``); the worker writes one
JSON result with the timeline (spawn -> imports done -> data loaded -> first batch
-> last batch), the per-batch times and the check of what it was served. Only the
epoch itself is timed for the rates; data generation and the check are not.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import sys
import time
import traceback

START_WALL = time.time()

import numpy as np  # noqa: E402

from benchmarks.vision_data import VisionSpec, digest, make_data, verify  # noqa: E402


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _peak_rss_mb() -> float:
    """Peak resident memory (MB) of this process, or of its largest finished child when
    that is larger (DataLoader / Grain workers; Linux reports ``ru_maxrss`` in KiB)."""
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(me, kids) / 1024


def run(contender: str, spec: VisionSpec, spawn: float | None, profile: str | None = None) -> dict:
    from benchmarks.contenders import CONTENDERS

    entry = CONTENDERS[contender]
    load_before = os.getloadavg()[0]
    module = importlib.import_module(f"benchmarks.contenders.{entry.module}")
    imported = time.time()
    imported_cpu = _cpu_seconds()
    images, labels = make_data(spec.records, spec.seed)
    loaded = time.time()
    digests: list[tuple[np.ndarray, np.ndarray]] = []
    batch_times: list[float] = []
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    first = None
    for image, label in module.vision_epoch(images, labels, spec, **entry.options):
        digests.append((digest(image), np.array(label, copy=True)))
        now = time.perf_counter()
        batch_times.append(now - t0)
        if first is None:
            first = now
            first_wall = time.time()
            first_cpu = _cpu_seconds()  # the process's, from its start (W3)
    end = time.perf_counter()
    cpu_s = _cpu_seconds() - cpu0
    peak_rss_mb = _peak_rss_mb()  # before the check, whose copies are the harness's
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    load_after = os.getloadavg()[0]
    check = verify(images, digests)
    records = check["records"]
    first_size = digests[0][1].size if digests else 0
    epoch_s = end - t0
    steady_s = end - first if first is not None else float("nan")
    return {
        "contender": contender,
        "records": spec.records,
        "batch_size": spec.batch_size,
        "batches": len(digests),
        "epoch_s": epoch_s,
        "cpu_s": cpu_s,
        "peak_rss_mb": peak_rss_mb,
        "first_batch_s": (first - t0) if first is not None else None,
        "epoch_rate": records / epoch_s if epoch_s > 0 else None,
        "steady_rate": (records - first_size) / steady_s if steady_s > 0 else None,
        "spawn_to_first_batch_s": (first_wall - spawn) if spawn and first is not None else None,
        "spawn_to_imported_s": (imported - spawn) if spawn else None,
        "cpu_to_first_batch_s": first_cpu if first is not None else None,
        "cpu_to_imported_s": imported_cpu,
        "import_s": imported - START_WALL,
        "data_s": loaded - imported,
        "batch_times": [round(t, 6) for t in batch_times],
        "check": check,
        "load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "versions": module.versions(),
        **(module.extra_result() if hasattr(module, "extra_result") else {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--contender", required=True)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spawn", type=float, default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", default=None,
                        help="write cProfile stats of the epoch here (read: python -m pstats)")
    args = parser.parse_args(argv)
    spec = VisionSpec(records=args.records, batch_size=args.batch_size, seed=args.seed)
    try:
        result = run(args.contender, spec, args.spawn, args.profile)
    except Exception as err:  # reported, not fatal: the suite goes on
        result = {
            "contender": args.contender,
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc()[-4000:],
        }
    with open(args.out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # skip slow interpreter teardown (worker pools, TF); result is on disk


if __name__ == "__main__":
    sys.exit(main())
