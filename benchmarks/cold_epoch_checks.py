"""What a download's SHA-256 check and ``fsync`` cost a global shuffle's epoch 0 from a
bucket: :mod:`benchmarks.cold_epoch_timeline` in fresh processes, alternating the code as
it is with a variant that leaves them out (measurement only: a variant that skips them
gives up the cache's guarantees, see docs/object-storage.md "Verified" and "Atomic").

Variants: ``as_is``; ``no_sha256`` (downloads not checked against the dataset's SHA-256);
``no_fsync`` (a download renamed into the cache without ``fsync``); ``neither``.

Run: ``python -m benchmarks.cold_epoch_checks --variants as_is,neither --rounds 4
[--json X]`` (one line per run: the load at its start and its phases, seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

VARIANTS = ("as_is", "no_sha256", "no_fsync", "neither")


def _leave_out(variant: str) -> None:
    """Patch this process's datarax so its downloads skip what ``variant`` names."""
    from datarax.storage import cache, fetch

    if variant in ("no_fsync", "neither"):
        class _NoFsync:  # ``os`` as the cache module sees it, but ``fsync``
            def __getattr__(self, name: str) -> Any:
                return getattr(os, name)

            @staticmethod
            def fsync(fd: int) -> None:
                del fd

        cache.os = _NoFsync()  # type: ignore[assignment]
    if variant in ("no_sha256", "neither"):
        download = fetch.Fetcher.download

        def unchecked(self: fetch.Fetcher, obj: Any, part: str) -> None:
            download(self, dataclasses.replace(obj, sha256=None), part)

        fetch.Fetcher.download = unchecked  # type: ignore[method-assign]


def _one(variant: str) -> dict[str, Any]:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cold-epoch-checks-") as scratch:
        # the timeline's cache (633 MB a run) goes to the child's TMPDIR: removed here
        out = subprocess.run([sys.executable, "-m", "benchmarks.cold_epoch_checks", "--child",
                              variant], capture_output=True, text=True,
                             env={**os.environ, "TMPDIR": scratch})
    if out.returncode != 0:  # reported, not counted: the other runs go on
        return {"variant": variant, "load": round(load, 2),
                "failed": out.stderr.strip().splitlines()[-1:]}
    return {"variant": variant, "load": round(load, 2),
            **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="as_is,neither")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _leave_out(args.child)
        from benchmarks.cold_epoch_timeline import main as timeline

        timeline()
        return
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    runs = []
    for _ in range(args.rounds):
        for variant in variants:
            run = _one(variant)
            runs.append(run)
            if args.json:  # after each run: a failure later keeps those before
                with open(args.json, "w") as f:
                    json.dump(runs, f, indent=1)
            if "failed" in run:
                print(f"{variant:10s} load {run['load']:5.2f}  failed: {run['failed']}", flush=True)
                continue
            phases = run["phases_s"]
            spans = "  ".join(f"{k} {v:.2f}" for k, v in phases.items())
            print(f"{variant:10s} load {run['load']:5.2f}  {spans}  epoch 0 ends "
                  f"{run['epoch_end_s']:.2f}  cpu {run['cpu_s']:.2f}", flush=True)


if __name__ == "__main__":
    main()
