"""Variants of ``benchmarks.cold_epoch_timeline``, each patched into a fresh child process.

The one driver of ``cold_epoch_checks`` (integrity checks left out) and
``cold_epoch_overlap`` (downloads started sooner): each names its variants and how to
patch the library for one; :func:`main` runs every variant in turns for ``--rounds``,
each in a new process whose cache (633 MB a run) lies in a temporary folder removed after
it, and prints the timeline's phases per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any


def one_run(module: str, variant: str) -> dict[str, Any]:
    """``python -m module --child variant``'s timeline, or what made it fail."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"{module.rsplit('.', 1)[-1]}-") as scratch:
        # the timeline's cache goes to the child's TMPDIR: removed here
        out = subprocess.run([sys.executable, "-m", module, "--child", variant],
                             capture_output=True, text=True, env={**os.environ, "TMPDIR": scratch})
    if out.returncode != 0:  # reported, not counted: the other runs go on
        return {"variant": variant, "load": round(load, 2),
                "failed": out.stderr.strip().splitlines()[-1:]}
    return {"variant": variant, "load": round(load, 2),
            **json.loads(out.stdout.strip().splitlines()[-1])}


def main(module: str, doc: str, variants: Sequence[str], default: str,
         patch: Callable[[str], None], line: Callable[[dict[str, Any]], str]) -> None:
    """Run ``module``'s ``variants`` (the ``--variants`` default: ``default``) in turns;
    in a child, ``patch(variant)`` then the timeline. ``line(run)`` ends each run's line."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--variants", default=default)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        patch(args.child)
        from benchmarks.cold_epoch_timeline import main as timeline

        timeline()
        return
    chosen = args.variants.split(",")
    unknown = sorted(set(chosen) - set(variants))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(variants)}")
    runs = []
    for _ in range(args.rounds):
        for variant in chosen:
            run = one_run(module, variant)
            runs.append(run)
            if args.json:  # after each run: a failure later keeps those before
                with open(args.json, "w") as f:
                    json.dump(runs, f, indent=1)
            if "failed" in run:
                print(f"{variant:10s} load {run['load']:5.2f}  failed: {run['failed']}", flush=True)
                continue
            spans = "  ".join(f"{k} {v:.2f}" for k, v in run["phases_s"].items())
            print(f"{variant:10s} load {run['load']:5.2f}  {spans}  {line(run)}", flush=True)
