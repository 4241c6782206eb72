"""W10's compiled step beside W1's and the plain ``jax.jit`` twin: program size and the
seconds to trace, lower and compile each, alternating in one process.

``python -m benchmarks.w10_program [--repeats 5] [--records 50000] [--json PATH]``

The programs are the ones a first batch compiles: each pipeline (W1: flip + /255 over
a shuffled ``MemorySource``, batch 256; W10: the same after a filter keeping the even
labels) is iterated once with compiling ahead and the store of compiled steps off, and
every step it compiles is captured with its arguments; the plain twin is
``benchmarks.first_batch``'s (its filter on the host). Then, ``--repeats`` times, each
program in turn is traced afresh (a new closure: nothing cached by JAX), lowered and
compiled with the options datarax compiles its steps with. Reported per program: lines
of the lowered text and StableHLO ops in it, median wall and CPU seconds (CPU: every
thread of the process, what other jobs on a shared machine disturb less) of each
phase, and the totals as ratios to the plain twin's — in the same run, so a loaded
machine moves all of them alike.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import emit

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["DATARAX_COMPILE_AHEAD"] = "0"  # the first batch compiles, on this thread
os.environ["DATARAX_COMPILE_CACHE"] = "0"  # and nothing is loaded from an earlier run


def captured(workload: str, images: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """``(function, arguments)`` of each step the workload's first batch compiles."""
    import jax

    from benchmarks.first_batch import _datarax
    from datarax.core import compiled_store

    found: list[tuple[Any, tuple[Any, ...]]] = []
    original = compiled_store.StoredJit.executable

    def executable(self: Any, *args: Any, ahead: bool = False) -> Any:
        if not any(fn is self.jitted.__wrapped__ for fn, _ in found):
            found.append((self.jitted.__wrapped__, args))
        return original(self, *args, ahead=ahead)

    compiled_store.StoredJit.executable = executable  # type: ignore[method-assign]
    try:
        jax.block_until_ready(_datarax(workload, images)())
    finally:
        compiled_store.StoredJit.executable = original  # type: ignore[method-assign]
    return found


def measure(programs: dict[str, tuple[Any, tuple[Any, ...]]], repeats: int) -> dict[str, Any]:
    import jax

    from datarax.core.compiled_store import compiler_options

    jax.jit(lambda x: x + 1).lower(1).compile()  # the compiler's start-up, counted nowhere
    seen: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(list))
    for _ in range(repeats):
        for name, (fn, args) in programs.items():
            fresh = jax.jit(lambda *a, fn=fn: fn(*a))
            marks = [(time.perf_counter(), time.process_time())]
            traced = fresh.trace(*args)
            marks.append((time.perf_counter(), time.process_time()))
            lowered = traced.lower()
            marks.append((time.perf_counter(), time.process_time()))
            lowered.compile(compiler_options=compiler_options() or None)
            marks.append((time.perf_counter(), time.process_time()))
            for phase, (a, b) in zip(("trace", "lower", "compile"), zip(marks, marks[1:])):
                seen[name][phase].append(b[0] - a[0])
                seen[name][phase + "_cpu"].append(b[1] - a[1])
            text = lowered.as_text()
            seen[name]["lines"] = len(text.splitlines())
            seen[name]["ops"] = len(re.findall(r"stablehlo\.\w+", text))
    rows = {}
    for name, got in seen.items():
        row: dict[str, Any] = {"lines": got["lines"], "ops": got["ops"]}
        for key, values in got.items():
            if isinstance(values, list):
                row[key + "_s"] = round(statistics.median(values), 4)
        row["total_s"] = round(sum(row[p + "_s"] for p in ("trace", "lower", "compile")), 4)
        row["total_cpu_s"] = round(sum(row[p + "_cpu_s"] for p in ("trace", "lower", "compile")), 4)
        rows[name] = row
    plain = rows["jax.jit W10"]
    for row in rows.values():
        row["total_vs_plain"] = round(row["total_s"] / plain["total_s"], 2)
        row["total_cpu_vs_plain"] = round(row["total_cpu_s"] / plain["total_cpu_s"], 2)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["FIRST_BATCH_RECORDS"] = str(args.records)
    from benchmarks.first_batch import _data, plain_program

    images = _data("W1")
    programs = {"jax.jit W10": plain_program("W10", images)}
    for workload in ("W1", "W10"):
        for i, program in enumerate(captured(workload, images)):
            programs[f"datarax {workload}" + (f" [{i}]" if i else "")] = program
    rows = measure(programs, args.repeats)
    report = {"records": args.records, "repeats": args.repeats,
              "load_avg_1m": round(os.getloadavg()[0], 2), "programs": rows}
    emit(report, args.json, indent=1)


if __name__ == "__main__":
    main()
