"""What each program of W10's two-phase loader costs a fresh process's first batch.

``python -m benchmarks.w10_two_phase_costs [--records 50000] [--repeats 5] [--out PATH]``

Each run is a fresh process (``--one``) with JAX's persistent compilation cache warm (one
untimed process first fills it, as ``w10_filter`` warms its JAX contenders): the images
and labels copied (``owned_device_put_all``), then, for each program of
:mod:`benchmarks.contenders.filter_two_phase` in the order an epoch calls it, its trace,
lowering, compile (the cache's load) and first run (with the host reading the result)
timed apart, in wall seconds. Phase 1 is the program choosing the epoch's kept records
(``choose_on_device`` or ``keeps``, the mask), phase 2 the batch step from them
(``step_from_kept`` or ``step_from_rows``, the owned floor's step with the labels
gathered too);
``step_alone`` times phase 2 with no phase 1 before it (the rows chosen on the host, as
the owned floor does): what one program costs, so that the second program's share of the
first batch is the difference. Reported: per case, the median of each cost over the runs.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import emit, parser, run_worker, worker_env

#: per compaction, the programs in an epoch's order
PROGRAMS = {"device": ("choose_on_device", "step_from_kept"),
            "host": ("keeps", "step_from_rows"),
            "step_alone": (None, "step_from_rows")}  # phase 2 as the one program: the floor


def timed(jitted: Any, *args: Any) -> tuple[dict[str, float], Any]:
    """``jitted``'s trace, lowering, compile and first run (the host reading its last
    output), timed apart; and its outputs."""
    t0 = time.perf_counter()
    traced = jitted.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    out = compiled(*args)
    np.asarray(out[-1] if isinstance(out, tuple) else out)
    t4 = time.perf_counter()
    return {"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2, "run": t4 - t3}, out


def run_one(compact: str, records: int, batch: int, seed: int) -> dict[str, Any]:
    """One fresh process's costs, program by program (wall seconds)."""
    from benchmarks.contenders.filter_two_phase import programs
    from benchmarks.vision_data import make_data
    from datarax.core.owned import owned_device_put_all

    images, labels = make_data(records, seed)
    began = time.perf_counter()
    data, marks = owned_device_put_all([images, labels])
    costs: dict[str, Any] = {"copy": time.perf_counter() - began}
    jitted = programs(batch)
    order = np.random.default_rng(seed).permutation(records).astype(np.int32)
    chosen, step = PROGRAMS[compact]
    if chosen is None:  # the floor's way: the host chose the rows
        first = order[labels[order] % 2 == 0][:batch]
    else:
        costs[chosen], out = timed(jitted[chosen], data, marks, order)
        # phase 2's first batch: from the kept rows on the device, or the host's first ones
        first = out[0] if compact == "device" else order[np.asarray(out)][:batch]
    costs[step], _ = timed(jitted[step], data, marks, first, np.int32(seed), np.int32(0))
    costs["first_batch"] = time.perf_counter() - began
    return costs


def main() -> None:
    options = parser(__doc__, records=50_000, batch=256, seed=0, repeats=5)
    options.add_argument("--one", choices=tuple(PROGRAMS))
    options.add_argument("--out", type=Path)
    args = options.parse_args()
    if args.one:
        emit(run_one(args.one, args.records, args.batch, args.seed), args.out, indent=None)
        return
    scratch = tempfile.TemporaryDirectory(prefix="datarax-w10-costs-")  # removed at exit
    report: dict[str, Any] = {"records": args.records, "batch": args.batch,
                              "repeats": args.repeats, "load_avg_1m": []}
    runs: dict[str, list[dict]] = {compact: [] for compact in PROGRAMS}
    for compact in PROGRAMS:  # each its own cache, filled by one untimed run
        env = worker_env({"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}, warm_up=True,
                         cache_home=os.path.join(scratch.name, compact))
        one = ["--one", compact, "--records", str(args.records), "--batch", str(args.batch),
               "--seed", str(args.seed)]
        run_worker("benchmarks.w10_two_phase_costs", one, env, timeout=600, check=True)
        for _ in range(args.repeats):
            runs[compact].append(run_worker("benchmarks.w10_two_phase_costs", one, env,
                                            timeout=600, check=True))
            report["load_avg_1m"].append(round(os.getloadavg()[0], 2))
    for compact, rows in runs.items():
        report[compact] = {
            key: ({part: round(statistics.median(r[key][part] for r in rows), 4)
                   for part in rows[0][key]} if isinstance(rows[0][key], dict)
                  else round(statistics.median(r[key] for r in rows), 4))
            for key in rows[0]}
    emit(report, args.out, indent=1)


if __name__ == "__main__":
    main()
