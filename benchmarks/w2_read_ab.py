"""W2 read path, before / after: the W2 records read through a ``Pipeline`` by two
source trees side by side, beside the raw floor.

Workload: the W2 records (100,000 x 3,072 B, see ``bench_array_record``), one shuffled
epoch (seed 0), batch 256, through a ``Pipeline(batch_size=256)``; ``--contender``:

* ``dataset`` (default) — the records written once as a datarax dataset (8 shards), read
  with no user code: ``ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0,
  shuffle_files=True), folder)``;
* ``decode`` — the 8 ArrayRecord files with the benchmark's per-record ``decode``
  (``bench_array_record.decode``: ``np.frombuffer(record, np.uint8).reshape(32, 32, 3)``);
* ``decode_batch`` — the same files with ``bench_array_record.decode_batch``.

``floor``: array_record's reader in a plain chunked loop (``bench_array_record.run_floor``).

Fresh processes alternate, before, after, before, after... (``--pairs`` each); each one
runs ``--rounds`` rounds of floor then Pipeline (ratio: that round's floor seconds /
Pipeline seconds; CPU: process user + sys seconds of the epoch). Each process also
checks the values: a digest of every batch of an epoch in order, and of an epoch whose
pipeline was saved after 37 batches and restored into a fresh one (the saved state is
part of it, less its informative ``prefetch_cache``). Both trees must give the same
digests (``identical`` in the JSON).

Run: ``env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m benchmarks.w2_read_ab
--before /path/to/older/checkout [--after .] [--pairs 6] [--rounds 2] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORDS = 100_000
BATCH = 256
SAVED_AFTER = 37  # batches before the pipeline's state is saved and restored


CONTENDERS = ("dataset", "decode", "decode_batch")


def _paths(folder: str, contender: str) -> list[str]:
    """The files ``contender`` reads: the dataset's shards, or the ArrayRecord files the
    dataset folder was written from (beside it)."""
    from benchmarks.bench_array_record import make_files, read_metadata_paths

    if contender == "dataset":
        return read_metadata_paths(folder)
    return make_files(RECORDS, directory=pathlib.Path(folder).parents[1])


def _pipeline(folder: str, contender: str = "dataset") -> Any:
    from benchmarks import bench_array_record as w2
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    config = ArrayRecordSourceConfig(seed=0, shuffle_files=True)
    if contender == "dataset":
        source = ArrayRecordSourceModule(config, folder)
    else:  # the ArrayRecord files the dataset was written from, with the user's decode
        paths = _paths(folder, contender)
        decoding = ({"decode": w2.decode} if contender == "decode"
                    else {"decode_batch": w2.decode_batch})
        source = ArrayRecordSourceModule(config, paths, **decoding)
    return source, Pipeline(source=source, stages=[], batch_size=BATCH)


def _epoch(folder: str, contender: str) -> tuple[float, float]:
    """Seconds and process CPU seconds of one checked epoch through the Pipeline."""
    from benchmarks.bench_array_record import checked_epoch

    source, pipeline = _pipeline(folder, contender)
    return checked_epoch(source, pipeline, RECORDS, contender)


def _digests(folder: str, contender: str = "dataset") -> dict[str, str]:
    """sha256 of every batch of one epoch, and of the same epoch saved after
    ``SAVED_AFTER`` batches and restored into a fresh pipeline (state included)."""
    import numpy as np

    def add(h: Any, batch: Any) -> None:
        for key in sorted(batch):
            value = np.asarray(batch[key])
            h.update(f"{key}{value.dtype}{value.shape}".encode())
            h.update(value.tobytes())

    source, pipeline = _pipeline(folder, contender)
    whole = hashlib.sha256()
    for batch in pipeline:
        add(whole, batch)
    source.close()
    source, pipeline = _pipeline(folder, contender)
    resumed = hashlib.sha256()
    iterator = iter(pipeline)
    for _ in range(SAVED_AFTER):
        add(resumed, next(iterator))
    state = pipeline.get_state()
    source.close()
    source, pipeline = _pipeline(folder, contender)
    pipeline.set_state(state)
    for batch in pipeline:
        add(resumed, batch)
    source.close()
    # what a state restores (its "prefetch_cache", records read ahead then, is informative)
    restored = {**state, "source": {k: v for k, v in state.get("source", {}).items()
                                    if k != "prefetch_cache"}}
    saved = json.dumps(restored, sort_keys=True, default=repr).encode()
    return {"epoch": whole.hexdigest(), "resumed": resumed.hexdigest(),
            "state": hashlib.sha256(saved).hexdigest()}


def worker(folder: str, rounds: int, contender: str = "dataset") -> dict[str, Any]:
    """``rounds`` rounds of floor then Pipeline (the floor reads the same files), then
    the value digests."""
    from benchmarks.bench_array_record import run_floor

    paths = _paths(folder, contender)
    load = round(os.getloadavg()[0], 2)
    floor, pipe = [], []
    for _ in range(rounds):
        floor.append(run_floor(paths, RECORDS, BATCH, 0))
        pipe.append(_epoch(folder, contender))
    return {
        "load": load,
        "ratio": [round(f[0] / p[0], 3) for f, p in zip(floor, pipe)],
        "pipeline_wall": [round(p[0], 3) for p in pipe],
        "pipeline_cpu": [round(p[1], 3) for p in pipe],
        "floor_wall": [round(f[0], 3) for f in floor],
        "floor_cpu": [round(f[1], 3) for f in floor],
        "digests": _digests(folder, contender),
    }


def _run_tree(tree: pathlib.Path, folder: str, rounds: int,
              contender: str = "dataset") -> dict[str, Any]:
    """One fresh process importing datarax from ``tree``'s ``src`` (this file's helpers
    from this checkout)."""
    code = (f"import sys, json; sys.path[:0] = [{str(tree / 'src')!r}, {str(ROOT)!r}]\n"
            "import datarax; assert datarax.__file__.startswith(sys.path[0]), datarax.__file__\n"
            "from benchmarks.w2_read_ab import worker\n"
            f"print(json.dumps(worker({folder!r}, {rounds}, {contender!r})))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=str(tree))
    if out.returncode:
        raise RuntimeError(f"the run of {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(before: pathlib.Path, after: pathlib.Path, pairs: int, rounds: int,
        folder: str, contender: str = "dataset") -> dict[str, Any]:
    from benchmarks.bench_array_record import warm

    warm(_paths(folder, contender))
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(pairs):
        for name, tree in (("before", before), ("after", after)):
            runs[name].append(_run_tree(tree, folder, rounds, contender))
            print(name, runs[name][-1]["ratio"], runs[name][-1]["pipeline_cpu"],
                  runs[name][-1]["load"], file=sys.stderr, flush=True)

    def flat(name: str, key: str) -> list[float]:
        return [x for r in runs[name] for x in r[key]]

    digests = {name: {json.dumps(r["digests"], sort_keys=True) for r in rs}
               for name, rs in runs.items()}
    summary = {
        name: {
            "median_ratio_vs_floor": round(statistics.median(flat(name, "ratio")), 3),
            "ratio_range": [min(flat(name, "ratio")), max(flat(name, "ratio"))],
            "median_pipeline_cpu_s": round(statistics.median(flat(name, "pipeline_cpu")), 3),
            "median_floor_cpu_s": round(statistics.median(flat(name, "floor_cpu")), 3),
            "median_pipeline_wall_s": round(statistics.median(flat(name, "pipeline_wall")), 3),
            "median_floor_wall_s": round(statistics.median(flat(name, "floor_wall")), 3),
        }
        for name in runs
    }
    return {
        "workload": f"one shuffled epoch (seed 0) of the {RECORDS} W2 records, batch {BATCH}, "
                    f"through a Pipeline: {WORKLOADS[contender]}; floor: "
                    "bench_array_record.run_floor",
        "contender": contender,
        "cpus": os.cpu_count(),
        "before": str(before), "after": str(after),
        "pairs": pairs, "rounds_per_process": rounds,
        "load_start_end": [runs["before"][0]["load"], round(os.getloadavg()[0], 2)],
        "identical": len(digests["before"] | digests["after"]) == 1,
        "digests": sorted(digests["before"] | digests["after"]),
        "summary": summary,
        "runs": runs,
    }


WORKLOADS = {
    "dataset": "the records as a datarax dataset (8 shards), no user code",
    "decode": "the 8 ArrayRecord files, the per-record decode bench_array_record.decode",
    "decode_batch": "the 8 ArrayRecord files, bench_array_record.decode_batch",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="checkout of the older revision")
    parser.add_argument("--after", default=str(ROOT), help="checkout of the newer one")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--folder", default=None,
                        help="dataset folder of the W2 records (default: written once by "
                             "bench_array_record under data/bench_arrayrecord/)")
    parser.add_argument("--contender", choices=CONTENDERS, default="dataset")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    folder = args.folder
    if folder is None:
        from benchmarks.bench_array_record import make_dataset, make_files

        folder = make_dataset(make_files(RECORDS), RECORDS)
    result = run(pathlib.Path(args.before).resolve(), pathlib.Path(args.after).resolve(),
                 args.pairs, args.rounds, str(pathlib.Path(folder).resolve()), args.contender)
    print(json.dumps(result["summary"], indent=2), "identical:", result["identical"])
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
