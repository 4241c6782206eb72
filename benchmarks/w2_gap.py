"""W2: why two side-by-side measurements of the per-record ``decode`` path disagree.

The project's harness (``bench_array_record`` / ``w2_read_ab``) times the Pipeline's
epoch from its first ``next`` (the source built and its first record decoded before the
clock starts) against a floor whose readers are open before its clock starts, read with
a 32 KiB buffer, 8 batches per ``read`` call. A measurement from outside times what a
user waits for: building the source, the pipeline, and every batch. This script runs,
in turns in one process (``--rounds`` rounds, every contender once a round), the same
shuffled epoch of the W2 records as:

* ``floor`` — ``bench_array_record.run_floor`` (the harness's floor);
* ``floor_4k`` — the same with datarax's 4 KiB read buffer;
* ``floor_per_batch`` — the floor issuing one read per batch of 256, not per 8 batches;
* ``floor_open`` — the floor with its readers' opening timed;
* ``pipeline`` — ``bench_array_record.run_datarax_pipeline`` (the harness's clock);
* ``pipeline_built`` — the same with building the source and the Pipeline timed
  (what an outside measurement counts);
* ``pipeline_1thread`` — the Pipeline with one reader thread (``num_threads=1``), as
  the floor reads;

and reports each one's median seconds, CPU seconds (user + sys of the process: what
other jobs on a shared machine disturb less) and the per-round ratios to ``floor``.

Run: ``python -m benchmarks.w2_gap [--records N] [--rounds R] [--json PATH]``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks import bench_array_record as w2
from benchmarks.harness import emit, parser, rotated

BATCH = 256


def floor(paths: list[str], records: int, buffer: int = 32768, per_read: int = 8,
          time_open: bool = False) -> float:
    """The harness's floor, with its read buffer, batches per read and whether the
    readers' opening is timed as options."""
    start = time.perf_counter()
    readers = w2.open_floor_readers(paths, buffer)
    if not time_open:
        start = time.perf_counter()
    file_of, within = w2.floor_positions(readers, w2.epoch_order(records, 0))
    check = w2.Check(records)
    for images in w2.floor_batches(readers, file_of, within, BATCH, per_read):
        check.add(images)
    elapsed = time.perf_counter() - start
    for r in readers:
        r.close()
    check.verify("floor")
    return elapsed


def pipeline_built(paths: list[str], records: int, num_threads: int = 4) -> float:
    """The per-record ``decode`` Pipeline with building the source and the Pipeline timed."""
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    start = time.perf_counter()
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0, shuffle_files=True),
                                     paths, decode=w2.decode, num_threads=num_threads)
    pipeline = Pipeline(source=source, stages=[], batch_size=BATCH)
    check = w2.Check(records)
    for out in pipeline:
        check.add(out["image"])
    elapsed = time.perf_counter() - start
    source.close()
    check.verify("pipeline_built")
    return elapsed


def run(records: int, rounds: int) -> dict[str, Any]:
    paths = w2.make_files(records, 8)
    w2.warm(paths)
    contenders = {
        "floor": lambda: floor(paths, records),
        "floor_4k": lambda: floor(paths, records, buffer=4096),
        "floor_per_batch": lambda: floor(paths, records, per_read=1),
        "floor_open": lambda: floor(paths, records, time_open=True),
        "pipeline": lambda: w2.run_datarax_pipeline(paths, records, BATCH, 0)[0],
        "pipeline_built": lambda: pipeline_built(paths, records),
        "pipeline_1thread": lambda: pipeline_built(paths, records, num_threads=1),
    }
    pipeline_built(paths, records)  # imports and the first compile out of the rounds
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        names = list(contenders)
        for name in rotated(names, r):
            began = time.process_time()
            seconds[name].append(contenders[name]())
            cpu[name].append(time.process_time() - began)  # setup included: small
    out: dict[str, Any] = {"records": records, "rounds": rounds, "contenders": {}}
    for name, runs in seconds.items():
        ratios = [f / s for f, s in zip(seconds["floor"], runs)]  # floor seconds / its
        out["contenders"][name] = {
            "median_s": round(statistics.median(runs), 4),
            "records_per_s": round(records / statistics.median(runs)),
            "cpu_s": round(statistics.median(cpu[name]), 4),
            "vs_floor_median": round(statistics.median(ratios), 3),
            "vs_floor_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    return out


def main() -> None:
    args = parser(__doc__, "json", records=100_000, rounds=6).parse_args()
    emit(run(args.records, args.rounds), args.json)


if __name__ == "__main__":
    main()
