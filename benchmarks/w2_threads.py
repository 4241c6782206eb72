"""W2 per-record ``decode`` through a Pipeline beside the chunked floor: CPU per thread.

One process, ``--rounds`` rounds, each running in turn (``rotated``):

* ``floor`` — ``bench_array_record.run_floor`` (array_record's reader in a chunked loop);
* ``pipeline`` — ``bench_array_record.run_datarax_pipeline`` (the seed's per-record
  ``decode``, ``Pipeline(batch_size=256)``);
* ``pipeline_switch`` — the same with Python's thread switch interval at 0.5 ms instead
  of 5 ms for its epoch (restored after): how much of the Pipeline's wall clock is
  threads waiting for the interpreter's lock (a process-wide setting: datarax never sets it).

Per contender and round: wall and process CPU seconds of the epoch (the harness's clock),
and CPU seconds by thread from ``/proc/self/task/*/schedstat`` grouped by name: ``main``,
the reader threads, ``datarax-dispatch``, and native threads (``native``: array_record's
read pool). ``reader_calls``: wall seconds summed over the reader threads inside
``ChunkReads.fetch`` (the raw reads) and ``DecodedRecords.decode_all`` (decode, check,
stack). Medians over the rounds, with the median of the per-round ratios to the floor.

Run: ``python -m benchmarks.w2_threads [--rounds 5] [--json PATH]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks import bench_array_record as w2
from benchmarks.harness import emit, parser, rotated, thread_cpu, time_calls

RECORDS = 100_000


def _group(name: str) -> str:
    if "reader" in name:
        return "readers"
    return name.rstrip("0123456789_-")


def measured(run: Callable[[], tuple[float, float]], ended: dict[int, tuple[str, float]],
             calls: dict[str, float]) -> dict[str, Any]:
    """One epoch of ``run`` with its CPU by thread group (``ended``: threads that ended
    inside it, read at their end; ``calls``: the reader calls' timers, reset here)."""
    ended.clear()
    calls.clear()
    before = thread_cpu()
    wall, cpu = run()
    after = thread_cpu()
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    by_group: dict[str, float] = defaultdict(float)
    for tid, (kernel_name, ran) in {**after, **ended}.items():
        if tid == main:
            name = "main"
        elif tid in ended:
            name = ended[tid][0]
        else:
            name = python_names.get(tid, "native")
        by_group[_group(name)] += ran - before.get(tid, ("", 0.0))[1]
    return {"wall": wall, "cpu": cpu, "threads": dict(by_group), "reader_calls": dict(calls)}


def pipeline_switch(paths: list[str]) -> tuple[float, float]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        return w2.run_datarax_pipeline(paths, RECORDS, 256, 0)
    finally:
        sys.setswitchinterval(previous)


def run(rounds: int) -> dict[str, Any]:
    from datarax.sources.chunk_reads import ChunkReads
    from datarax.sources.decoded_records import DecodedRecords

    paths = w2.make_files(RECORDS, 8)
    w2.warm(paths)
    ended: dict[int, tuple[str, float]] = {}
    original_run = threading.Thread.run

    def thread_run(self: threading.Thread) -> None:  # a thread's CPU, read as it ends
        try:
            original_run(self)
        finally:
            with open("/proc/thread-self/schedstat") as f:
                ended[threading.get_native_id()] = (self.name, int(f.read().split()[0]) / 1e9)

    threading.Thread.run = thread_run  # type: ignore[method-assign]
    calls: dict[str, float] = {}
    time_calls(ChunkReads, "fetch", "fetch", calls)
    time_calls(DecodedRecords, "decode_all", "decode_all", calls)
    contenders = {
        "floor": lambda: w2.run_floor(paths, RECORDS, 256, 0),
        "pipeline": lambda: w2.run_datarax_pipeline(paths, RECORDS, 256, 0),
        "pipeline_switch": lambda: pipeline_switch(paths),
    }
    w2.run_datarax_pipeline(paths, RECORDS, 256, 0)  # imports and first use, unmeasured
    load = [round(os.getloadavg()[0], 2)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for turn in range(rounds):
        for name in rotated(list(contenders), turn):
            runs[name].append(measured(contenders[name], ended, calls))
    load.append(round(os.getloadavg()[0], 2))
    floor = [r["wall"] for r in runs["floor"]]
    out: dict[str, Any] = {"records": RECORDS, "rounds": rounds, "load_1m": load}
    for name, got in runs.items():
        groups = sorted({g for r in got for g, spent in r["threads"].items() if spent > 0.0005})
        out[name] = {
            "wall_s": round(statistics.median(r["wall"] for r in got), 3),
            "cpu_s": round(statistics.median(r["cpu"] for r in got), 3),
            "vs_floor": round(statistics.median(f / r["wall"] for f, r in zip(floor, got)), 3),
            "threads_cpu_s": {g: round(statistics.median(r["threads"].get(g, 0.0) for r in got), 3)
                              for g in groups},
            "reader_calls_s": {k: round(statistics.median(r["reader_calls"].get(k, 0.0) for r in got), 3)
                               for k in ("fetch", "decode_all")},
        }
    return out


def main() -> None:
    args = parser(__doc__, "json", rounds=5).parse_args()
    emit(run(args.rounds), args.json)


if __name__ == "__main__":
    main()
