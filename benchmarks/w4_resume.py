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

``--repeats R`` runs R fresh resume processes per contender in turns (medians and every
run reported); ``--beside SRC`` times another datarax source tree (main's ``src``, say)
in the same turns, for a before/after ratio from one run.

Run: ``python -m benchmarks.w4_resume [--records N] [--repeats R] [--beside SRC]
[--json PATH]``.
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

from benchmarks.harness import emit, parser, rotated

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
    ids.append(_ids(next(iterator)))
    second = time.perf_counter() - restored
    for _ in range(NEXT_EPOCH_BATCHES - 1):
        ids.append(_ids(next(iterator)))
    Path(out_file).write_text(json.dumps({
        "build_s": built - t_start, "restore_to_next_batch_s": restored - built,
        "second_batch_s": second, "batches": ids}))


def run_grain_w4(paths: list[str], seed: int, repeats: int = 1) -> dict[str, Any]:
    """Grain's restore -> next batch in ``repeats`` fresh processes, and whether it
    resumed exactly."""
    state, expected = grain_state(paths, seed)
    runs = [grain_resume(paths, seed, state, expected) for _ in range(repeats)]
    return _summary(state, runs)


def grain_state(paths: list[str], seed: int) -> tuple[Any, list[list[int]]]:
    """Grain's state after ``AFTER`` records, and the batches an exact resume gives."""
    reference = _grain_iter(paths, seed)
    expected = [_ids(next(reference)) for _ in range(AFTER // BATCH + 1 + NEXT_EPOCH_BATCHES)]
    interrupted = _grain_iter(paths, seed)
    for _ in range(AFTER // BATCH):
        next(interrupted)
    return interrupted.get_state(), expected[AFTER // BATCH:]


def grain_resume(paths: list[str], seed: int, state: Any,
                 expected: list[list[int]]) -> dict[str, Any]:
    """One fresh process restoring Grain's ``state``: its times, and whether exact."""
    resumed = _in_child("--grain-child", paths, seed, state, _child_env())
    return {"build_s": resumed["build_s"],
            "restore_to_next_batch_s": resumed["restore_to_next_batch_s"],
            "second_batch_s": resumed["second_batch_s"],
            "exact": resumed["batches"] == expected}


def _in_child(flag: str, paths: list[str], seed: int, state: Any,
              env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="datarax-w4-") as tmp:
        state_file, out_file = Path(tmp) / "state.json", Path(tmp) / "out.json"
        state_file.write_text(json.dumps(state))
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.w4_resume", flag, str(state_file),
             str(out_file), "--seed", str(seed), "--paths", *paths],
            env=env, capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"W4 resume process ({flag}) failed:\n{proc.stderr[-3000:]}")
        return json.loads(out_file.read_text())


def _summary(state: Any, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run's times, every run's restore time, and whether all were exact."""
    times = sorted(r["restore_to_next_batch_s"] for r in runs)
    return {
        "state_bytes": _size(state),
        "build_s": round(float(np.median([r["build_s"] for r in runs])), 4),
        "restore_to_next_batch_s": round(float(np.median(times)), 4),
        "restore_runs_s": [round(r["restore_to_next_batch_s"], 4) for r in runs],
        "following_batch_s": round(float(np.median([r["second_batch_s"] for r in runs])), 4),
        "exact": all(r["exact"] for r in runs),
    }


def _child_env(src: str | None = None) -> dict[str, str]:
    """The child's environment: this checkout's benchmarks importable, and ``src`` (a
    datarax source tree) first on the path when given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (src, str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", ""))
        if p
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


def run_w4(records: int = 100_000, files: int = 8, seed: int = 0, grain: bool = True,
           repeats: int = 1, beside: str | None = None) -> dict[str, Any]:
    """W4 with ``repeats`` fresh resume processes per contender, run in turns (this
    tree, ``beside`` — another datarax source tree, e.g. main's ``src`` before a
    change — and Grain, in an order that rotates every round), so a loaded machine
    disturbs each alike; the median and every run are reported."""
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
    expected = reference[AFTER // BATCH:] + reference_next
    grain_start = grain_state(paths, seed) if grain else None
    sides: dict[str, list[dict[str, Any]]] = {"datarax": []}
    if beside:
        sides["beside"] = []
    if grain_start:
        sides["grain"] = []
    for round_ in range(repeats):
        names = list(sides)
        for name in rotated(names, round_):
            if name == "grain":
                assert grain_start is not None
                sides[name].append(grain_resume(paths, seed, *grain_start))
                continue
            env = _child_env(beside if name == "beside" else None)
            resumed = _in_child("--child", paths, seed, state, env)
            resumed["exact"] = resumed.pop("batches") == expected
            sides[name].append(resumed)
    runs = sides["datarax"]
    mine = _summary(state, runs)
    peer = _summary(grain_start[0], sides["grain"]) if grain_start else None
    other = max(records // 2, AFTER + 4 * BATCH)
    out: dict[str, Any] = {
        "grain": peer,
        "restore_vs_grain": (round(mine["restore_to_next_batch_s"]
                                   / peer["restore_to_next_batch_s"], 3) if peer else None),
        "restore_vs_grain_by_round": ([round(a["restore_to_next_batch_s"]
                                             / b["restore_to_next_batch_s"], 3)
                                       for a, b in zip(runs, sides["grain"])] if peer else None),
        "workload": f"W4: resume after {AFTER} records of {records} (batch {BATCH}), fresh "
                    f"process, {repeats} round(s)",
        "state_bytes": _size(state),
        "state_bytes_pretty_json": len(encoded.encode()),
        "state_bytes_by_records": {
            records: _size(state),
            other: state_size(make_files(other, files), seed),
        },
        "state": state,
        "build_s": mine["build_s"],
        "restore_to_next_batch_s": mine["restore_to_next_batch_s"],
        "restore_runs_s": mine["restore_runs_s"],
        "set_state_and_iter_s": round(float(np.median([r["set_state_s"] for r in runs])), 4),
        "following_batch_s": round(float(np.median([r["second_batch_s"] for r in runs])), 4),
        "exact": mine["exact"],
        "batches_compared": len(expected),
        "targets": {
            "state <= 512 bytes": _size(state) <= 512,
            "restore -> next batch <= 0.05 s": mine["restore_to_next_batch_s"] <= 0.05,
            "exact": mine["exact"],
        },
    }
    if beside:
        before = _summary(state, sides["beside"])
        out["beside"] = {"src": beside, **before}
        out["restore_vs_beside_by_round"] = [
            round(a["restore_to_next_batch_s"] / b["restore_to_next_batch_s"], 3)
            for a, b in zip(runs, sides["beside"])]
        if peer:
            out["beside_vs_grain_by_round"] = [
                round(a["restore_to_next_batch_s"] / b["restore_to_next_batch_s"], 3)
                for a, b in zip(sides["beside"], sides["grain"])]
    return out


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__, "json", records=100_000, files=8, seed=0)
    options.add_argument("--no-grain", action="store_true", help="skip the Grain peer")
    options.add_argument("--repeats", type=int, default=1,
                         help="fresh resume processes per contender, run in turns")
    options.add_argument("--beside", default=None, metavar="SRC",
                         help="another datarax source tree (e.g. main's src) timed in turns "
                              "with this one: before/after a change in one run")
    options.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    options.add_argument("--grain-child", nargs=2, default=None, help=argparse.SUPPRESS)
    options.add_argument("--paths", nargs="*", default=None, help=argparse.SUPPRESS)
    args = options.parse_args(argv)
    if args.child:
        child(args.paths, args.seed, *args.child)
        return
    if args.grain_child:
        grain_child(args.paths, args.seed, *args.grain_child)
        return
    result = run_w4(args.records, args.files, args.seed, grain=not args.no_grain,
                    repeats=args.repeats, beside=args.beside)
    emit(result, args.json)


if __name__ == "__main__":
    main()
