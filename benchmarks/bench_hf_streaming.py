"""W5: Hugging Face streaming through a datarax Pipeline beside plain ``datasets``.

Writes a local 100,000-row parquet dataset shaped like SST-2 (``idx`` int32,
``sentence`` str, ``label`` int64; 4 files), then times full passes over the same
``load_dataset(folder, split="train", streaming=True)`` data, one after the other in
one process, after a warm-up pass of each (files in the page cache):

* ``floor``: plain ``datasets`` batched iteration, ``ds.iter(batch_size=B)`` (dicts
  of Python lists) — the cheapest way ``datasets`` itself hands out batches of B;
* ``floor_numpy``: ``ds.with_format("numpy").iter(batch_size=B)`` (numpy arrays, as
  close to "batches of arrays" as ``datasets`` gets), for scale;
* ``floor_records``: plain ``for example in ds`` (one dict per record), for scale;
* ``pipeline``: ``Pipeline(HFStreamingSource(...), stages=[], batch_size=B)``:
  numeric fields as JAX arrays, text as lists of ``str``, spec-checked, with state;
* ``pipeline_prefetch0``: the same with ``prefetch=0`` (batches read on the loop's
  thread, as before the stream was read ahead);
* ``pipeline_extract``: the same with the seed's ``extract_fields`` ElementOperator
  (per-record Python on text batches), for scale.

``overlap``: a pass of each pipeline with a simulated train step per batch (a wait of
twice the pipeline's own time per batch, as when the loop waits for the accelerator):
``hidden`` is the share of the data time the loop does not pay (1.0: all of it).

Reports records/s (median of ``--repeats`` passes) and the ratio pipeline / floor
(target >= 0.8). Run: ``python benchmarks/bench_hf_streaming.py [--rows 100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def write_dataset(folder: str, rows: int, files: int = 4) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    rng = np.random.default_rng(0)
    words = np.array("a the movie was good bad great dull fun long short film plot acting".split())
    lengths = rng.integers(3, 30, rows)
    sentences = [" ".join(rng.choice(words, n)) for n in lengths]
    table = pa.table(
        {
            "idx": np.arange(rows, dtype=np.int32),
            "sentence": sentences,
            "label": rng.integers(0, 2, rows).astype(np.int64),
        }
    )
    step = -(-rows // files)
    for f in range(files):
        pq.write_table(
            table.slice(f * step, step),
            os.path.join(folder, "data", f"train-{f:05d}-of-{files:05d}.parquet"),
        )


def timed(fn, repeats: int) -> tuple[float, int]:
    fn()  # warm-up pass (page cache, compilation)
    times, count = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), count


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--folder", default=None, help="reuse/write the dataset here")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets
    import jax
    from flax import nnx

    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    datasets.disable_progress_bars()
    folder = args.folder or os.path.join(tempfile.mkdtemp(prefix="w5_"), "sst2_like")
    if not os.path.isdir(os.path.join(folder, "data")):
        write_dataset(folder, args.rows)
    B = args.batch_size
    plain = datasets.load_dataset(folder, split="train", streaming=True)

    def floor() -> int:
        n = 0
        for batch in plain.iter(batch_size=B):
            n += len(batch["idx"])
        return n

    def floor_numpy() -> int:
        n = 0
        for batch in plain.with_format("numpy").iter(batch_size=B):
            n += len(batch["idx"])
        return n

    def floor_records() -> int:
        n = 0
        for _ in plain:
            n += 1
        return n

    def make_pipeline(prefetch: int) -> Pipeline:
        source = HFStreamingSource(HFStreamingConfig(name=folder, split="train", chunk_size=4096))
        return Pipeline(source=source, stages=[], batch_size=B, prefetch=prefetch,
                        rngs=nnx.Rngs(0))

    pipelines = {2: make_pipeline(2), 0: make_pipeline(0)}

    def run_pipeline(prefetch: int = 2, wait: float = 0.0) -> int:
        n = 0
        for batch in pipelines[prefetch]:
            n += len(batch["sentence"])
            if wait:
                np.asarray(batch["label"])  # the step reads the batch, then waits
                time.sleep(wait)
        jax.block_until_ready(batch["label"])
        return n

    def extract_fields(element, key=None):
        return element.update_data({"text": element.data["sentence"], "label": element.data["label"]})

    extract_source = HFStreamingSource(HFStreamingConfig(name=folder, split="train", chunk_size=4096))
    extract = Pipeline(
        source=extract_source,
        stages=[ElementOperator(ElementOperatorConfig(stochastic=False), fn=extract_fields)],
        batch_size=B,
        rngs=nnx.Rngs(0),
    )

    def run_extract() -> int:
        n = 0
        for batch in extract:
            n += len(batch["text"])
        return n

    results: dict = {"rows": args.rows, "batch_size": B, "repeats": args.repeats}
    # floor and pipeline passes alternate, so load from other processes hits both alike
    pairs = {"floor": floor, "pipeline": run_pipeline, "floor_numpy": floor_numpy,
             "pipeline_prefetch0": lambda: run_pipeline(0)}
    times: dict[str, list[float]] = {name: [] for name in pairs}
    for fn in pairs.values():
        fn()  # warm-up pass (page cache, compilation)
    for _ in range(args.repeats):
        for name, fn in pairs.items():
            t0 = time.perf_counter()
            count = fn()
            times[name].append(time.perf_counter() - t0)
            if count != args.rows:
                raise SystemExit(f"{name} served {count} records, expected {args.rows}")
    for name, values in times.items():
        seconds = statistics.median(values)
        results[name] = {"seconds": round(seconds, 4), "records_per_s": round(args.rows / seconds)}
    for name, fn in (("floor_records", floor_records), ("pipeline_extract", run_extract)):
        seconds, count = timed(fn, 1)
        if count != args.rows:
            raise SystemExit(f"{name} served {count} records, expected {args.rows}")
        results[name] = {"seconds": round(seconds, 4), "records_per_s": round(count / seconds)}
    batches = -(-args.rows // B)
    wait = 2 * results["pipeline"]["seconds"] / batches
    train = batches * wait
    results["overlap"] = {"train_s_per_batch": round(wait, 6)}
    for prefetch, name in ((2, "pipeline"), (0, "pipeline_prefetch0")):
        both = timed(lambda p=prefetch: run_pipeline(p, wait), 3)[0]
        data = results[name]["seconds"]
        results["overlap"][name] = {
            "both_s": round(both, 4),
            "hidden": round(max(0.0, min(1.0, (data + train - both) / data)), 3),
        }
    results["ratio_pipeline_vs_floor"] = round(
        results["pipeline"]["records_per_s"] / results["floor"]["records_per_s"], 3
    )
    results["ratio_pipeline_vs_floor_numpy"] = round(
        results["pipeline"]["records_per_s"] / results["floor_numpy"]["records_per_s"], 3
    )
    results["ratio_extract_vs_floor_records"] = round(
        results["pipeline_extract"]["records_per_s"] / results["floor_records"]["records_per_s"], 3
    )
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
