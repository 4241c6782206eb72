"""Epoch switch: a host source's loop across epoch boundaries beside a simulated train step.

The pipeline of ``benchmarks/on_chip.py``'s ``array_record_host`` (W1's stages over W2's
ArrayRecord files: 50,000 records of 3 KB, a decode per record, ``shuffle_files=True``,
batch 256; :func:`benchmarks.device_check._host_pipeline`) stepped with
``pipeline.step()`` then ``time.sleep(sleep_ms)`` for 3 epochs (the first batch, which
compiles, left out). Each run, in a fresh process: ms per batch of the loop, the mean
step, the calls at each epoch switch, the time the 11 calls from each switch took over
11 median calls, the slowest calls; and the sha256 of every batch of the 3 epochs (read
again without the sleep: the same batches and order before and after a change).

``--repeats R`` runs in turns; ``--beside SRC`` times another datarax source tree (main's
``src``, say) in the same turns: before/after from one run.

Run: ``python -m benchmarks.epoch_switch [--repeats R] [--beside SRC] [--json PATH]``.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import ROOT, emit, parser, rotated, run_worker, worker_env

RECORDS, BATCH, EPOCHS = 50_000, 256, 3


def child(sleep_ms: float, out: str) -> None:
    import jax

    from benchmarks.device_check import _host_pipeline

    make = _host_pipeline(RECORDS, BATCH)
    per_epoch = -(-RECORDS // BATCH)
    digest, pipeline = hashlib.sha256(), make()
    for _ in range(EPOCHS * per_epoch):
        batch = pipeline.step()
        for key in sorted(batch):
            digest.update(np.asarray(batch[key]).tobytes())
    pipeline = make()
    pipeline.step()  # compiles
    time.sleep(sleep_ms / 1e3)
    calls = []
    start = time.perf_counter()
    for _ in range(EPOCHS * per_epoch - 1):
        t = time.perf_counter()
        jax.block_until_ready(pipeline.step())
        calls.append((time.perf_counter() - t) * 1e3)
        time.sleep(sleep_ms / 1e3)
    total = (time.perf_counter() - start) * 1e3
    ms = np.asarray(calls)  # ms[k]: batch k + 1
    median = float(np.median(ms))
    switches = [e * per_epoch - 1 for e in range(1, EPOCHS)]
    slowest = sorted(np.argsort(ms)[-8:].tolist())
    result = {
        "sha256": digest.hexdigest(),
        "loop_ms_per_batch": round(total / len(ms), 3),
        "step_mean_ms": round(float(ms.mean()), 3),
        "step_median_ms": round(median, 3),
        "switch_call_ms": [round(float(ms[s]), 1) for s in switches],
        "switch_extra_ms": round(sum(float(ms[s:s + 11].sum()) - 11 * median
                                     for s in switches), 1),
        "slowest_calls": [[i + 1, round(float(ms[i]), 1)] for i in slowest],
    }
    Path(out).write_text(json.dumps(result))


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("loop_ms_per_batch", "step_mean_ms", "switch_extra_ms")
    return {f"median_{k}": round(statistics.median(r[k] for r in runs), 3) for k in keys} | {
        "sha256": sorted({r["sha256"] for r in runs}), "runs": runs}


def run(repeats: int, sleep_ms: float, beside: str | None) -> dict[str, Any]:
    sides = {"mine": str(ROOT / "src")} | ({"beside": beside} if beside else {})
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for turn in range(repeats):
        for name in rotated(list(sides), turn):
            got[name].append(run_worker("benchmarks.epoch_switch",
                                        ["--child", "--sleep-ms", str(sleep_ms)],
                                        worker_env(src=sides[name]), check=True))
    out: dict[str, Any] = {"records": RECORDS, "batch": BATCH, "epochs": EPOCHS,
                           "sleep_ms": sleep_ms, "repeats": repeats}
    for name, runs in got.items():
        out[name] = {"src": sides[name], **_summary(runs)}
    if beside:
        out["same_batches"] = out["mine"]["sha256"] == out["beside"]["sha256"]
    return out


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__, "json", "out", repeats=3, sleep_ms=4.0)
    options.add_argument("--beside", default=None, metavar="SRC",
                         help="another datarax source tree timed in turns with this one")
    options.add_argument("--child", action="store_true", help="(one measurement)")
    args = options.parse_args(argv)
    if args.child:
        child(args.sleep_ms, str(args.out))
        return
    emit(run(args.repeats, args.sleep_ms, args.beside), args.json)


if __name__ == "__main__":
    sys.exit(main())
