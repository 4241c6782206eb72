"""W4: resume an ArrayRecord pipeline after 30,000 records, in a fresh process.

The parent runs one shuffled epoch uninterrupted and notes the record ids of every
batch; it stops a second run after 30,000 records (120 batches of 250), saves
``pipeline.get_state()`` as JSON, and starts a new process that builds an equal
pipeline, calls ``set_state`` and times restore -> first batch materialised. The
resumed batches (rest of the epoch, then two batches of the next epoch) must match
the uninterrupted run exactly. The state size (compact JSON bytes) is measured at two
dataset sizes to show it does not grow with the data. Grain runs the same steps as the
peer (``MapDataset.source(ArrayRecordDataSource).shuffle(seed).map(decode).batch(250)``
-> ``to_iter_dataset(ReadOptions(num_threads=4, prefetch_buffer_size=8))``, its iterator's ``get_state``/``set_state``), checked against
its own uninterrupted run.

Run: ``python -m benchmarks.w4_resume [--records N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

AFTER = 30_000
BATCH = 250  # 30,000 = 120 full batches
NEXT_EPOCH_BATCHES = 2


def _pipeline(paths: list[str], seed: int):
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    from benchmarks.bench_array_record import decode

    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(seed=seed, shuffle_files=True), paths, decode=decode
    )
    return Pipeline(source=source, stages=[], batch_size=BATCH)


def _grain_iter(paths: list[str], seed: int):
    import grain

    from benchmarks.bench_array_record import decode

    source = grain.sources.ArrayRecordDataSource(paths)
    ds = grain.MapDataset.source(source).shuffle(seed=seed).map(decode).batch(BATCH)
    # W2's Grain settings (its default, 16 threads and 500 batches ahead, starts slower)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)))


def grain_child(paths: list[str], seed: int, state_file: str, out_file: str) -> None:
    """Fresh process: Grain's iterator built, restored, first batch timed."""
    import grain  # noqa: F401  imports are not part of the restore

    t_start = time.perf_counter()
    iterator = _grain_iter(paths, seed)
    built = time.perf_counter()
    iterator.set_state(json.loads(Path(state_file).read_text()))
    ids = [_ids(next(iterator))]
    restored = time.perf_counter()
    for _ in range(NEXT_EPOCH_BATCHES):
        ids.append(_ids(next(iterator)))
    Path(out_file).write_text(json.dumps({
        "build_s": built - t_start, "restore_to_next_batch_s": restored - built, "batches": ids}))


def run_grain_w4(paths: list[str], seed: int) -> dict[str, Any]:
    """Grain's restore -> next batch in a fresh process, and whether it resumed exactly."""
    reference = _grain_iter(paths, seed)
    expected = [_ids(next(reference)) for _ in range(AFTER // BATCH + 1 + NEXT_EPOCH_BATCHES)]
    interrupted = _grain_iter(paths, seed)
    for _ in range(AFTER // BATCH):
        next(interrupted)
    state = interrupted.get_state()
    with tempfile.TemporaryDirectory(prefix="datarax-w4-grain-") as tmp:
        state_file, out_file = Path(tmp) / "state.json", Path(tmp) / "out.json"
        state_file.write_text(json.dumps(state))
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.w4_resume", "--grain-child", str(state_file),
             str(out_file), "--seed", str(seed), "--paths", *paths],
            env=_child_env(), capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"W4 Grain resume process failed:\n{proc.stderr[-3000:]}")
        resumed = json.loads(out_file.read_text())
    return {
        "state_bytes": _size(state),
        "build_s": round(resumed["build_s"], 4),
        "restore_to_next_batch_s": round(resumed["restore_to_next_batch_s"], 4),
        "exact": resumed["batches"] == expected[AFTER // BATCH:],
    }


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")) if p
    )
    return env


def _ids(batch: dict[str, Any]) -> list[int]:
    from benchmarks.bench_array_record import record_ids

    return record_ids(np.asarray(batch["image"])).tolist()


def _epoch_ids(pipeline, stop_after: int | None = None) -> list[list[int]]:
    out: list[list[int]] = []
    seen = 0
    iterator = iter(pipeline)
    for batch in iterator:
        out.append(_ids(batch))
        seen += len(out[-1])
        if stop_after is not None and seen >= stop_after:
            break
    return out


def child(paths: list[str], seed: int, state_file: str, out_file: str) -> None:
    """Fresh process: build, restore, time the first batch, record what follows."""
    import datarax.pipeline  # noqa: F401  imports are not part of the restore
    import datarax.sources  # noqa: F401

    t_start = time.perf_counter()
    pipeline = _pipeline(paths, seed)
    built = time.perf_counter()
    pipeline.set_state(json.loads(Path(state_file).read_text()))
    iterator = iter(pipeline)
    set_done = time.perf_counter()
    first = next(iterator)
    ids = [_ids(first)]  # _ids materialises the batch
    restored = time.perf_counter()
    second = time.perf_counter()
    ids.append(_ids(next(iterator)))
    second = time.perf_counter() - second
    ids += [_ids(b) for b in iterator]
    for i, batch in enumerate(pipeline):  # the next epoch
        ids.append(_ids(batch))
        if i + 1 >= NEXT_EPOCH_BATCHES:
            break
    Path(out_file).write_text(json.dumps({
        "build_s": built - t_start,
        "restore_to_next_batch_s": restored - built,
        "set_state_s": set_done - built,
        "second_batch_s": second,
        "batches": ids,
    }))


def state_size(paths: list[str], seed: int) -> int:
    pipeline = _pipeline(paths, seed)
    _epoch_ids(pipeline, stop_after=AFTER)
    return _size(pipeline.get_state())


def _size(state: dict[str, Any]) -> int:
    """Bytes of the state as compact JSON (how a checkpoint would store it)."""
    return len(json.dumps(state, separators=(",", ":")).encode())


def run_w4(records: int = 100_000, files: int = 8, seed: int = 0, grain: bool = True) -> dict[str, Any]:
    from benchmarks.bench_array_record import make_files, warm

    paths = make_files(records, files)
    warm(paths)
    reference = _epoch_ids(_pipeline(paths, seed))
    reference_next = []
    pipe_ref = _pipeline(paths, seed)
    _epoch_ids(pipe_ref)
    for i, batch in enumerate(pipe_ref):
        reference_next.append(_ids(batch))
        if i + 1 >= NEXT_EPOCH_BATCHES:
            break
    interrupted = _pipeline(paths, seed)
    _epoch_ids(interrupted, stop_after=AFTER)
    state = interrupted.get_state()
    encoded = json.dumps(state)
    with tempfile.TemporaryDirectory(prefix="datarax-w4-") as tmp:
        state_file, out_file = Path(tmp) / "state.json", Path(tmp) / "out.json"
        state_file.write_text(encoded)
        env = _child_env()
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.w4_resume", "--child", str(state_file),
             str(out_file), "--seed", str(seed), "--paths", *paths],
            env=env, capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"W4 resume process failed:\n{proc.stderr[-3000:]}")
        resumed = json.loads(out_file.read_text())
    expected = reference[AFTER // BATCH:] + reference_next
    exact = resumed["batches"] == expected
    other = max(records // 2, AFTER + 4 * BATCH)
    peer = run_grain_w4(paths, seed) if grain else None
    return {
        "grain": peer,
        "restore_vs_grain": (round(resumed["restore_to_next_batch_s"]
                                   / peer["restore_to_next_batch_s"], 3) if peer else None),
        "workload": f"W4: resume after {AFTER} records of {records} (batch {BATCH}), fresh process",
        "state_bytes": _size(state),
        "state_bytes_pretty_json": len(encoded.encode()),
        "state_bytes_by_records": {
            records: _size(state),
            other: state_size(make_files(other, files), seed),
        },
        "state": state,
        "build_s": round(resumed["build_s"], 4),
        "restore_to_next_batch_s": round(resumed["restore_to_next_batch_s"], 4),
        "set_state_and_iter_s": round(resumed["set_state_s"], 4),
        "following_batch_s": round(resumed["second_batch_s"], 4),
        "exact": exact,
        "batches_compared": len(expected),
        "targets": {
            "state <= 512 bytes": _size(state) <= 512,
            "restore -> next batch <= 0.05 s": resumed["restore_to_next_batch_s"] <= 0.05,
            "exact": exact,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-grain", action="store_true", help="skip the Grain peer")
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--grain-child", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--paths", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.paths, args.seed, *args.child)
        return
    if args.grain_child:
        grain_child(args.paths, args.seed, *args.grain_child)
        return
    result = run_w4(args.records, args.files, args.seed, grain=not args.no_grain)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
