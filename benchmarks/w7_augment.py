"""W7: an image augmentation chain over in-memory images, datarax against its peers.

``python -m benchmarks.w7_augment [--records 20000] [--repeats 1] [--json PATH]``

Each contender runs in its own fresh process (``--worker NAME``): it first pushes the
fixed-parameter images through its own transform code (the same-work check against
the numpy reference, see ``benchmarks/augment_data.py``), then times one shuffled
epoch of batch 256 where the consumer only takes per-record channel means. The
report gives records/s over the whole epoch and after the first batch, and ratios to
the best peer and to the numpy floor from the same run. Torch runs twice: hand-written
per-record ops (``torch-*``: the chain's own definitions through
``torch.nn.functional``) and ``torchvision.transforms.v2`` as a user writes it
(``torchvision-v2*``; its ColorJitter brightness and contrast differ from the chain's,
so its fixed-parameter check takes torchvision's definitions, see
``benchmarks/augment_data.py``). The torchvision wheel here is a CUDA build; it runs
against the CPU torch (``import_torchvision`` in ``w7_contenders``), installed by the
Makefile's bench set-up.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.harness import rotated, run_worker, worker_env

CHECK_RECORDS = 16


def worker(name: str, records: int, batch_size: int, seed: int, out: str) -> None:
    """One contender, one epoch; writes its JSON result to ``out``."""
    import numpy as np

    from benchmarks.augment_data import check_fixed, digest, make_data, verify
    from benchmarks.w7_contenders import COLOR, CONTENDERS

    try:
        epoch, fixed, options, _, _ = CONTENDERS[name]
        images, labels = make_data(records, seed)
        check = check_fixed(fixed(images[:CHECK_RECORDS]), images[:CHECK_RECORDS],
                            color=COLOR.get(name, "chain"))
        seen: list[Any] = []
        t0 = time.perf_counter()
        first = None
        for image, label in epoch(images, labels, batch_size, seed, **options):
            seen.append((digest(image), np.array(label, copy=True)))
            if first is None:
                first = time.perf_counter()
                first_size = len(label)
        end = time.perf_counter()
        served = verify(seen, records)
        result = {
            "contender": name, "epoch_s": end - t0, "first_batch_s": first - t0,
            "epoch_rate": records / (end - t0),
            "steady_rate": (records - first_size) / (end - first) if end > first else None,
            "fixed_check": check, "served": served,
            "ok": bool(check["ok"] and served["ok"]),
        }
    except Exception as err:  # reported, not fatal
        result = {"contender": name, "error": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc()[-3000:]}
    Path(out).write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)


def run_one(name: str, records: int, batch_size: int, seed: int, timeout: float,
            cache_home: str | None = None) -> dict[str, Any]:
    from benchmarks.w7_contenders import ENV, REQUIRES, WARM_UP

    if importlib.util.find_spec(REQUIRES[name]) is None:
        return {"contender": name, "missing": REQUIRES[name]}
    args = ["--worker", name, "--records", str(records), "--batch-size", str(batch_size),
            "--seed", str(seed)]
    env = worker_env(ENV.get(name, {}), cache_home=cache_home, warm_up=name in WARM_UP)
    result = run_worker("benchmarks.w7_augment", args, env, timeout=timeout)
    return result if "contender" in result else {"contender": name, **result}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median rates per contender; ratios to the best peer and the floor (same run)."""
    from statistics import median

    from benchmarks.w7_contenders import CONTENDERS

    rows: dict[str, Any] = {}
    for name, results in runs.items():
        good = [r for r in results if "epoch_rate" in r]
        if not good:
            first = results[0]
            rows[name] = {"status": "missing " + first["missing"] if "missing" in first
                          else "error: " + first.get("error", "?")}
            continue
        rows[name] = {
            "status": "ok" if all(r["ok"] for r in good) else "check failed",
            "epoch_rate": median(r["epoch_rate"] for r in good),
            "steady_rate": median(r["steady_rate"] for r in good if r["steady_rate"]),
            "first_batch_s": median(r["first_batch_s"] for r in good),
            "fixed_mean_abs_error": good[0]["fixed_check"].get("mean_abs_error"),
            "note": CONTENDERS[name][3],
        }
    ok = {n: r for n, r in rows.items() if r.get("status") == "ok"}
    peers = {n: r for n, r in ok.items() if not n.startswith("datarax") and not CONTENDERS[n][4]}
    floor = next((r for n, r in ok.items() if CONTENDERS[n][4]), None)
    for key in ("epoch_rate", "steady_rate"):
        best = max(peers.items(), key=lambda kv: kv[1][key], default=None)
        for row in ok.values():
            if best:
                row[f"{key}_vs_best_peer"] = round(row[key] / best[1][key], 3)
            if floor:
                row[f"{key}_vs_floor"] = round(row[key] / floor[key], 3)
        if best:
            rows[f"best_peer_{key}"] = best[0]
    return rows


def run(records: int, repeats: int, batch_size: int = 256, seed: int = 0,
        contenders: list[str] | None = None, timeout: float = 1800, log=print) -> dict[str, Any]:
    import shutil

    from benchmarks.w7_contenders import CONTENDERS, WARM_UP

    names = contenders or list(CONTENDERS)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    load_start, started = os.getloadavg(), time.gmtime()
    cache_home = tempfile.mkdtemp(prefix="datarax-w7-cache-")
    try:
        for name in names:
            if name in WARM_UP:
                run_one(name, records, batch_size, seed, timeout, cache_home)
        _timed(names, runs, records, repeats, batch_size, seed, timeout, cache_home, log)
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
    return {"workload": "W7", "records": records, "batch_size": batch_size, "repeats": repeats,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", started),
            "cpus": os.cpu_count(), "load_at_start": [round(x, 2) for x in load_start],
            "load_at_end": [round(x, 2) for x in os.getloadavg()],
            "summary": summarize(runs), "runs": runs}


def _timed(names, runs, records, repeats, batch_size, seed, timeout, cache_home, log) -> None:
    for rep in range(repeats):
        for name in rotated(names, rep):
            r = run_one(name, records, batch_size, seed, timeout, cache_home)
            runs[name].append(r)
            log(f"W7 rep {rep + 1}/{repeats} {name}: " + (
                f"{r['epoch_rate']:,.0f} rec/s epoch, {r['steady_rate']:,.0f} steady, "
                f"check {'ok' if r['ok'] else (r['fixed_check'], r['served'])}"
                if "epoch_rate" in r else str(r.get("missing") or r.get("error"))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--contenders", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.records, args.batch_size, args.seed, args.out)
    names = args.contenders.split(",") if args.contenders else None
    result = run(args.records, args.repeats, args.batch_size, args.seed, names)
    for name, row in result["summary"].items():
        print(f"{name}: {row}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
