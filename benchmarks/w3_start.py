"""W3: process start -> first batch of W1, datarax beside Grain and a plain ``jax.jit``.

Every run is a fresh process (``benchmarks.worker``, as the suite runs W1), the
contenders in turns, the order rotating each round. Contenders: ``datarax-cold`` (its
store of compiled steps off: a user's first run), ``datarax`` (that store and JAX's
cache warm from an untimed run: a second run), ``grain`` (which imports JAX too) and
``jax-floor`` (a plain ``jax.jit`` of the same math). Per contender: the medians of the
wall seconds from spawn to the first batch and to the imports done, and of the
process's CPU seconds (all threads) to its first batch and to its imports — on a
shared machine the CPU seconds are the steadier comparison — and each round's ratio to
Grain's run of the same round.

Before timing, datarax's and these benchmarks' bytecode is written, as installing a
package writes it (Grain's, JAX's and Flax's was at install): where
``PYTHONDONTWRITEBYTECODE`` is set, a source tree without it compiles datarax again in
every process, 0.06-0.1 s of each start that no installed package pays.

Run: ``python -m benchmarks.w3_start [--rounds 3] [--records 50000] [--json PATH]``.
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import os
import shutil
import statistics
import tempfile
from typing import Any

from benchmarks.contenders import CONTENDERS
from benchmarks.harness import parser, rotated
from benchmarks.suite import VisionCase, run_vision

NAMES = ("datarax-cold", "datarax", "grain", "jax-floor")
KEYS = {"wall_s": "spawn_to_first_batch_s", "cpu_s": "cpu_to_first_batch_s",
        "import_wall_s": "spawn_to_imported_s", "import_cpu_s": "cpu_to_imported_s"}


def write_bytecode() -> None:
    """Compile datarax and the benchmarks the workers import into their ``__pycache__``."""
    for package in ("datarax", "benchmarks"):
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def run(rounds: int, records: int) -> dict[str, Any]:
    case = VisionCase("W3", "W3 start", records, 256)
    write_bytecode()
    cache_home = tempfile.mkdtemp(prefix="datarax-w3-")
    try:
        for name in NAMES:  # warm what warms up (untimed)
            if CONTENDERS[name].warm_up:
                run_vision(name, case, 0, cache_home=cache_home)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in NAMES}
        for r in range(rounds):
            order = rotated(NAMES, r)
            for name in order:
                result = run_vision(name, case, 0, cache_home=cache_home)
                if "error" in result or "missing" in result:
                    raise RuntimeError(f"{name}: {result}")
                if not result["check"]["ok"]:
                    raise AssertionError(f"{name} served a wrong epoch: {result['check']}")
                runs[name].append({k: round(result[v], 3) for k, v in KEYS.items()}
                                  | {"load": result["load_avg_1m"]})
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
    out: dict[str, Any] = {"records": records, "rounds": rounds, "cpus": os.cpu_count(),
                           "contenders": {}}
    for name, mine in runs.items():
        summary = {k: round(statistics.median(r[k] for r in mine), 3) for k in KEYS}
        for key in ("wall_s", "cpu_s"):
            summary[f"{key}_vs_grain_by_round"] = [
                round(a[key] / b[key], 2) for a, b in zip(mine, runs["grain"])]
        out["contenders"][name] = {**summary, "runs": mine}
    return out


def main() -> None:
    args = parser(__doc__, "json", rounds=3, records=50_000).parse_args()
    result = run(args.rounds, args.records)
    print(json.dumps({n: {k: v for k, v in c.items() if k != "runs"}
                      for n, c in result["contenders"].items()}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
