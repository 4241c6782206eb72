"""A cold first batch (W1 or W7), this tree beside another, in alternating fresh processes.

``python -m benchmarks.first_batch_ab --before /path/to/main/src [--workload W7] [--pairs 6]
[--json PATH]``

Each pair runs, in an order that alternates, one fresh process per tree of:

* ``cold`` — ``benchmarks.first_batch``'s datarax worker (no pause), each process
  with its own empty store of compiled steps (``DATARAX_COMPILE_CACHE_DIR``: the
  default store may be warm from an earlier run), build + first batch;
* ``no_ahead`` — the same pipeline with nothing compiled ahead and the store off, its
  build + first batch in wall and CPU seconds (user + sys of every thread: what other
  jobs on a shared machine disturb less), and the seconds JAX reports for XLA compiles
  (``jax.monitoring``'s backend-compile event).

Reported: every run, the medians, and the ratio of each pair (this tree / the other);
whether every run's first batch has the same SHA-256 (a tree of another random draw
version gives other values on purpose).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.first_batch import _run
from benchmarks.harness import ROOT, run_worker, worker_env


def no_ahead(workload: str = "W1") -> dict[str, float]:
    """In this process: the workload's build + first batch, nothing ahead, nothing stored."""
    import jax

    from benchmarks.first_batch import _data, _datarax

    compiles: list[float] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: compiles.append(duration)
        if event.endswith("backend_compile_duration") else None)
    images = _data(workload)
    cpu, wall = time.process_time(), time.perf_counter()
    first = _datarax(workload, images)
    jax.block_until_ready(first())
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "compile_s": sum(compiles)}


def _no_ahead_in(src: str, workload: str) -> dict[str, float]:
    env = worker_env({"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
                      "DATARAX_COMPILE_AHEAD": "0", "DATARAX_COMPILE_CACHE": "0"}, src=src)
    return run_worker("benchmarks.first_batch_ab", ["--no-ahead-worker", "--workload", workload],
                      env, check=True)


def run(before: str, pairs: int, workload: str = "W1") -> dict[str, Any]:
    trees = {"after": str(ROOT / "src"), "before": before}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        case: {side: [] for side in trees} for case in ("cold", "no_ahead")}
    for pair in range(pairs):
        for side in (["after", "before"] if pair % 2 == 0 else ["before", "after"]):
            with tempfile.TemporaryDirectory() as store:
                cold = _run("datarax", workload, 0.0, trees[side],
                            {"DATARAX_COMPILE_CACHE_DIR": store})
            cold["load"] = os.getloadavg()[0]
            runs["cold"][side].append(cold)
            runs["no_ahead"][side].append(_no_ahead_in(trees[side], workload))
    out: dict[str, Any] = {"workload": workload, "before": before, "pairs": pairs, "runs": runs}
    for case, key in (("cold", "first_s"), ("no_ahead", "wall_s"), ("no_ahead", "cpu_s"),
                      ("no_ahead", "compile_s")):
        after = [r[key] for r in runs[case]["after"]]
        prior = [r[key] for r in runs[case]["before"]]
        out[f"{case} {key}"] = {
            "after_median": round(statistics.median(after), 3),
            "before_median": round(statistics.median(prior), 3),
            "ratio_by_pair": [round(a / b, 3) for a, b in zip(after, prior)],
        }
    out["same_first_batch"] = len({r["sha256"] for side in runs["cold"].values()
                                   for r in side}) == 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the other datarax source tree (e.g. main's src)")
    parser.add_argument("--workload", default="W1", choices=["W1", "W7"])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--json")
    parser.add_argument("--no-ahead-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_ahead_worker:
        Path(args.out).write_text(json.dumps(no_ahead(args.workload)))
        return
    if not args.before:
        parser.error("--before SRC is required")
    result = run(args.before, args.pairs, args.workload)
    summary = {k: v for k, v in result.items() if k != "runs"}
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
