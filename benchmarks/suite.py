"""What the suite runs: workloads, their sizes per scale, and one timed process per run.

Vision cases (W1, W6) run every contender in its own fresh process per repetition,
rotating the order each repetition so no contender always goes first or last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.contenders import CONTENDERS
from benchmarks.harness import ROOT, run_worker, worker_env

__all__ = ["ROOT", "SCALES", "VisionCase", "run_import_probe", "run_vision", "vision_cases",
           "worker_env"]

SCALES = {"tiny": 600, "small": 10_000, "full": 50_000}  # W1 records per scale
WORKER_TIMEOUT_S = 900


@dataclass(frozen=True)
class VisionCase:
    """One in-memory vision configuration (a row group of the report)."""

    workload: str
    label: str
    records: int
    batch_size: int


def vision_cases(workloads: list[str], scale: str) -> list[VisionCase]:
    """W1 at batch 256; W6 at batch 32 and 1024 and with 4x the records."""
    n = SCALES[scale]
    cases = []
    if "W1" in workloads or "W3" in workloads:
        cases.append(VisionCase("W1", "W1 vision b256", n, 256))
    if "W6" in workloads:
        cases.append(VisionCase("W6", "W6 vision b32", n, 32))
        cases.append(VisionCase("W6", "W6 vision b1024", n, 1024))
        cases.append(VisionCase("W6", "W6 vision 4x data", 4 * n, 256))
    return cases


def _lower_priority_by(nice: int):
    if not nice:
        return None

    def set_nice() -> None:
        try:
            os.nice(nice)
        except OSError:  # not permitted (negative nice needs root): run at normal priority
            pass

    return set_nice


def run_vision(
    contender: str,
    case: VisionCase,
    seed: int,
    timeout: float = WORKER_TIMEOUT_S,
    *,
    nice: int = 0,
    cache_home: str | None = None,
) -> dict[str, Any]:
    """One epoch of ``contender`` in a fresh process; the worker's JSON result.

    ``nice`` is added to the worker's niceness (negative: higher priority, needs root);
    ``cache_home`` becomes its ``XDG_CACHE_HOME``, and holds the JAX persistent cache of
    the contenders that warm up.
    """
    entry = CONTENDERS[contender]
    missing = entry.missing()
    if missing:
        return {"contender": contender, "missing": missing}
    args = ["--contender", contender, "--records", str(case.records),
            "--batch-size", str(case.batch_size), "--seed", str(seed), "--spawn", repr(time.time())]
    env = worker_env(entry.env, cache_home=cache_home, warm_up=entry.warm_up)
    result = run_worker("benchmarks.worker", args, env, timeout=timeout,
                        preexec_fn=_lower_priority_by(nice))
    return result if "contender" in result else {"contender": contender, **result}


IMPORT_PROBE = r"""
import json, os, time
load0 = os.getloadavg()[0]
w, c = time.perf_counter, time.process_time
w0, c0 = w(), c()
import jax, jax.numpy
w1, c1 = w(), c()
import flax.nnx
w2, c2 = w(), c()
import datarax
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
w3, c3 = w(), c()
print(json.dumps({"jax_s": w1 - w0, "datarax_extra_s": w3 - w1, "flax_nnx_s": w2 - w1,
                  "datarax_own_s": w3 - w2, "jax_cpu_s": c1 - c0, "datarax_extra_cpu_s": c3 - c1,
                  "flax_nnx_cpu_s": c2 - c1, "datarax_own_cpu_s": c3 - c2,
                  "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}))
"""


def run_import_probe() -> dict[str, Any]:
    """Import time of JAX, of flax.nnx after it, and of what W1's program imports from
    datarax after both (``MemorySource``, ``ElementOperator``, ``Pipeline``)."""
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], cwd=ROOT, env=worker_env(),
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])
