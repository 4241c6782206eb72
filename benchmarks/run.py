"""Run the benchmark suite: ``python -m benchmarks.run [--workloads W1,W3] [--reps N] [--scale small|full]``.

Writes ``benchmarks/results/report.{md,png,json}``. See ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import report as report_mod
from benchmarks.contenders import CONTENDERS
from benchmarks.external import W2_RECORDS, run_external
from benchmarks.harness import rotated
from benchmarks.suite import ROOT, SCALES, run_import_probe, run_vision, vision_cases

ALL_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9")


def run_suite(
    workloads: list[str],
    reps: int,
    scale: str,
    contenders: list[str] | None = None,
    seed: int = 0,
    log=print,
    nice: int = 0,
    partial_out: Path | None = None,
    cases: list[str] | None = None,
) -> dict[str, Any]:
    """Run the selected workloads; return the report dict (see ``report.write``).
    ``cases``: keep only the cases whose label contains one of these (e.g. ``"b32"``).

    With ``partial_out``, the report so far is written there after every workload
    case, so an interrupted run still leaves its finished parts.
    """
    names = list(contenders or CONTENDERS)
    cache_home = tempfile.mkdtemp(prefix="datarax-bench-cache-")
    try:
        return _run_suite(workloads, reps, scale, names, seed, log, nice, cache_home, partial_out,
                          cases)
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)


def _run_suite(workloads, reps, scale, names, seed, log, nice, cache_home, partial_out,
               cases=None) -> dict[str, Any]:
    def wanted(label: str) -> bool:
        return not cases or any(c in label for c in cases)

    def checkpoint() -> None:
        if partial_out is not None:
            report_mod.write(result, partial_out)

    result: dict[str, Any] = {
        "scale": scale,
        "reps": reps,
        "workloads": workloads,
        "machine": report_mod.machine(),
        "versions": report_mod.package_versions(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "nice": nice,
        "vision": {},
        "external": {},
    }
    for case in vision_cases(workloads, scale):
        if not wanted(case.label):
            continue
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        warm_ups = {}
        for name in names:
            if CONTENDERS[name].warm_up and not CONTENDERS[name].missing():
                warm_ups[name] = run_vision(name, case, seed, nice=nice, cache_home=cache_home)
                log(f"{case.label} warm-up {name}: " + _one_line(warm_ups[name]))
        for rep in range(reps):
            for name in rotated(names, rep):
                r = run_vision(name, case, seed, nice=nice, cache_home=cache_home)
                runs[name].append(r)
                log(f"{case.label} rep {rep + 1}/{reps} {name}: " + _one_line(r))
        result["vision"][case.label] = {
            "case": dataclasses.asdict(case),
            "summary": report_mod.summarize_case(runs),
            "runs": runs,
            "warm_ups": warm_ups,
        }
        checkpoint()
    if "W3" in workloads:
        probes = [run_import_probe() for _ in range(max(reps, 3))]
        good = [p for p in probes if "error" not in p]
        result["imports"] = (
            {k: statistics.median(p[k] for p in good) for k in good[0] if k != "load_avg_1m"}
            if good else probes[0]
        )
        result["imports"]["probes"] = probes
        log(f"W3 imports: {result['imports']}")
    for wl in ("W2", "W4", "W5", "W7", "W8", "W9"):
        if wl in workloads:
            result["external"][wl] = run_external(wl, scale, reps)
            log(f"{wl}: {result['external'][wl]['status']}")
            checkpoint()
    if "W6" in workloads:  # W2 at other batch sizes and 4x the records
        records = W2_RECORDS[scale]
        for label, extra in (
            ("W6 arrayrecord b32", ["--batch", "32"]),
            ("W6 arrayrecord b1024", ["--batch", "1024"]),
            ("W6 arrayrecord 4x data", ["--records", str(4 * records)]),
        ):
            if not wanted(label):
                continue
            ext = run_external("W2", scale, reps, extra=extra)
            ext["what"] = f"{label}: W2 with {' '.join(extra)}"
            result["external"][label] = ext
            log(f"{label}: {ext['status']}")
            checkpoint()
    return result


def _one_line(r: dict[str, Any]) -> str:
    if "missing" in r:
        return "missing " + ", ".join(r["missing"])
    if "error" in r:
        return "error " + r["error"][:200]
    return (
        f"epoch {r['epoch_rate']:,.0f} rec/s, steady {r['steady_rate']:,.0f} rec/s, first batch "
        f"{r['first_batch_s']:.3f} s, check {'ok' if r['check']['ok'] else r['check']['problems']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", default=",".join(ALL_WORKLOADS),
                        help="comma-separated subset of " + ",".join(ALL_WORKLOADS))
    parser.add_argument("--reps", type=int, default=3, help="repetitions per contender")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full",
                        help="full: the issue's sizes; small: 1/5 of them; tiny: smoke test")
    parser.add_argument("--contenders", default=None,
                        help="comma-separated subset of " + ",".join(CONTENDERS))
    parser.add_argument("--cases", default=None,
                        help="comma-separated parts of case labels to keep, e.g. 'vision b32'")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness added to every worker; negative (root only) shields "
                        "the runs from other work on a shared machine")
    args = parser.parse_args(argv)
    workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in ALL_WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(ALL_WORKLOADS)}")
    contenders = None
    if args.contenders:
        contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
        bad = [c for c in contenders if c not in CONTENDERS]
        if bad:
            parser.error(f"unknown contenders {bad}; choose from {', '.join(CONTENDERS)}")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None
    report = run_suite(workloads, args.reps, args.scale, contenders, nice=args.nice,
                       partial_out=Path(args.out), cases=cases)
    paths = report_mod.write(report, Path(args.out))
    for kind, path in paths.items():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
