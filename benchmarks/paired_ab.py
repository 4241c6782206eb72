"""Paired before/after rounds of one benchmark script: the same script, two datarax trees.

Each round runs the script once per tree, in fresh processes, alternating which goes
first; the script is this checkout's (``benchmarks/``), only ``datarax`` is imported from
``--before`` or from this checkout's ``src``. Each run writes its ``--json``; this
collects the metric ``--metric`` (a dotted path into that JSON, e.g.
``ratios.datarax / floor, median of repetitions``) from each and reports, per round,
both values and after / before, then the medians, the spread and the load average.

Run: ``python -m benchmarks.paired_ab --before /tmp/old/src --rounds 5 --metric
"ratios.datarax / floor, median of repetitions" --json out.json -- benchmarks.w8_mixture
--contenders floor,datarax --repeats 15``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, run_worker, worker_env


def metric_of(result: dict[str, Any], path: str) -> float:
    """The number at the dotted ``path`` of ``result`` (keys may hold spaces, not dots)."""
    value: Any = result
    for part in path.split("."):
        value = value[part]
    return float(value)


def run_once(src: str, module_args: list[str], metric: str) -> dict[str, Any]:
    """One fresh process of ``python -m MODULE ARGS --json FILE`` importing datarax from ``src``."""
    load = os.getloadavg()[0]
    result = run_worker(module_args[0], module_args[1:], worker_env(src=src), check=True,
                        out_flag="--json")
    return {"value": metric_of(result, metric), "load_average_1m": round(load, 2), "result": result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the src folder of the old tree")
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--metric", required=True)
    parser.add_argument("--json", default=None)
    parser.add_argument("module", nargs=argparse.REMAINDER,
                        help="-- MODULE ARGS (the script must accept --json FILE)")
    args = parser.parse_args(argv)
    module = [a for a in args.module if a != "--"]
    rounds = []
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        runs = {name: run_once(args.before if name == "before" else args.after, module, args.metric)
                for name in order}
        ratio = runs["after"]["value"] / runs["before"]["value"]
        rounds.append({"order": order, "before": runs["before"]["value"],
                       "after": runs["after"]["value"], "after / before": ratio,
                       "load_average_1m": [runs[n]["load_average_1m"] for n in order],
                       "results": {n: runs[n]["result"] for n in order}})
        print(f"round {r + 1}: before {runs['before']['value']:.3f}  after "
              f"{runs['after']['value']:.3f}  after/before {ratio:.2f}  load "
              f"{rounds[-1]['load_average_1m']}", flush=True)
    summary = {
        "metric": args.metric,
        "module": module,
        "before_src": args.before,
        "median_before": statistics.median(r["before"] for r in rounds),
        "median_after": statistics.median(r["after"] for r in rounds),
        "median_after_over_before": statistics.median(r["after / before"] for r in rounds),
        "after_range": [min(r["after"] for r in rounds), max(r["after"] for r in rounds)],
        "before_range": [min(r["before"] for r in rounds), max(r["before"] for r in rounds)],
        "load_average_1m_range": [min(min(r["load_average_1m"]) for r in rounds),
                                  max(max(r["load_average_1m"]) for r in rounds)],
        "cpus": os.cpu_count(),
        "rounds": rounds,
    }
    print(f"median before {summary['median_before']:.3f}, after {summary['median_after']:.3f} "
          f"(range {summary['after_range'][0]:.3f}-{summary['after_range'][1]:.3f}), "
          f"after/before {summary['median_after_over_before']:.2f}, load "
          f"{summary['load_average_1m_range']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
