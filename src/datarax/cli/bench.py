"""``datarax bench py:MODULE:FUNCTION|DATASET``: is the loader the bottleneck?

Times the first batch, records/s after it and ``pipeline.stats()`` per stage; with
``--compare-floor``, also a plain read of the source.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import jax

from datarax.cli.inspect_source import records_in
from datarax.cli.targets import Target, endless_reason, length_of, open_target, split_spec
from datarax.core.errors import ConfigError
from datarax.core.extras import require
from datarax.core.reading import compiled


def _ready(batch: dict[str, Any]) -> None:
    jax.block_until_ready([v for v in batch.values() if isinstance(v, jax.Array)])


def measure_pipeline(pipeline: Any, *, batches: int | None, epochs: int | None) -> dict[str, Any]:
    """Run ``pipeline`` and time it (see the module docstring)."""
    pipeline.reset_stats()
    done_batches = done_records = steady_records = 0
    passes = 0
    first_batch_s: float | None = None
    started = time.perf_counter()
    steady_start = started
    while True:
        got_any = False
        for batch in pipeline:
            _ready(batch)
            got_any = True
            count = records_in(batch, pipeline)  # a padded batch: its real records
            done_batches += 1
            done_records += count
            if first_batch_s is None:
                first_batch_s = time.perf_counter() - started
                steady_start = time.perf_counter()
            else:
                steady_records += count
            if batches is not None and done_batches >= batches:
                break
        passes += 1
        if batches is not None and done_batches >= batches:
            break
        if epochs is not None and passes >= epochs:
            break
        if not got_any:
            raise ConfigError(
                f"the pipeline handed out no batch in pass {passes}; nothing to time."
            )
    steady_s = time.perf_counter() - steady_start
    return {
        "batches": done_batches,
        "records": done_records,
        "passes_started": passes,
        "time_to_first_batch_s": round(first_batch_s or 0.0, 6),
        "steady_seconds": round(steady_s, 6),
        "records_per_s": round(steady_records / steady_s, 1)
        if steady_records and steady_s > 0
        else None,
        "stats": pipeline.stats(),
    }


def _plain_batches(source: Any, batch_size: int) -> Iterator[dict[str, Any]]:
    """Batches read straight from ``source``, pass after pass, without a Pipeline."""
    source.set_shard(0, 1)
    n = length_of(source)
    if compiled(source) and n is not None:
        from flax import nnx

        graphdef, state = nnx.split(source)
        inputs = source.step_inputs()

        def gather(st: Any, inp: Any, start: Any, size: int) -> Any:
            src = nnx.merge(graphdef, st)
            with src.bind_step_inputs(inp):
                return src.get_batch_at(start, size, None)

        steps: dict[int, Any] = {}  # one compiled gather per batch size (the last may be short)
        while True:
            for start in range(0, n, batch_size):
                size = min(batch_size, n - start)
                if size not in steps:
                    steps[size] = jax.jit(gather, static_argnums=3)
                yield steps[size](state, inputs, start, size)
    epoch = 0
    while True:
        source.seek(epoch, 0)
        empty = True
        while (batch := source.get_batch_with_indices(batch_size)[0]) is not None:
            empty = False
            yield batch
        if empty:
            return
        epoch += 1


def measure_floor(target: Target, batch_size: int, records: int) -> dict[str, Any]:
    """Records/s of reading ``records`` records straight from the source, after the first batch."""
    batches = _plain_batches(target.source, batch_size)
    first = next(batches, None)
    if first is None:
        return {"records": 0, "seconds": 0.0, "records_per_s": None}
    _ready(first)
    read = 0
    started = time.perf_counter()
    for batch in batches:
        _ready(batch)
        read += records_in(batch)
        if read >= records:
            break
    seconds = time.perf_counter() - started
    return {
        "records": read,
        "seconds": round(seconds, 6),
        "records_per_s": round(read / seconds, 1) if read and seconds > 0 else None,
    }


def _open_bench_target(spec: str, images: dict[str, Any] | None) -> Target:
    """``spec`` opened for timing: a ``py:`` function's source or Pipeline, or a datarax dataset."""
    if spec.startswith("py:"):
        if images is not None:
            raise ConfigError("--resize / --crop / --random-resized-crop read a datarax dataset; "
                              f"'{spec}' builds its own source: give its decode= there.")
        return open_target(spec)
    if split_spec(spec)[0] != "arrayrecord":  # hf:, tfds: streams
        raise ConfigError(
            "bench takes py:MODULE:FUNCTION (a function returning a Pipeline or source) or a "
            f"datarax dataset folder, got '{spec}'.")
    target = open_target(spec, images=images)
    if target.info is None:
        target.source.close()
        raise ConfigError(
            f"bench times a datarax dataset (a folder written by datarax convert), and '{spec}' "
            "has no dataset metadata: give a py:MODULE:FUNCTION that builds the source with its "
            "decode=, or convert the data first.")
    if target.per_record is not None:
        target.source.close()
        raise ConfigError(
            f"{target.per_record} On the command line: bench {spec} --resize N --crop C (or "
            "--random-resized-crop S).")
    return target


def run_bench(
    spec: str,
    *,
    batches: int | None = 100,
    epochs: int | None = None,
    batch_size: int = 32,
    compare_floor: bool = False,
    png: str | None = None,
    as_json: bool = False,
    images: dict[str, Any] | None = None,
) -> int:
    """Open ``spec``, time it, print the report; exit status 0. ``images``: options of
    :func:`datarax.decode_images` for a dataset's image field."""
    for option, value in (("--epochs", epochs), ("--batches", None if epochs else batches)):
        if value is not None and value < 1:
            raise ConfigError(f"{option} must be >= 1, got {value}.")
    if png is not None:  # before the run, which the chart would otherwise throw away
        require("matplotlib", extra="cli", user="datarax bench --png")
    from datarax.pipeline import Pipeline

    with _open_bench_target(spec, images) as target:
        pipeline = target.pipeline  # never `or`: len() of a filtered pipeline raises
        if pipeline is None:
            pipeline = Pipeline(source=target.source, stages=[], batch_size=batch_size)
        endless = endless_reason(target.source)
        if epochs is not None and endless is not None:
            raise ConfigError(f"--epochs {epochs}: {endless}, so a pass never ends; time it "
                              "with --batches.")
        result = measure_pipeline(pipeline, batches=None if epochs else batches, epochs=epochs)
        result.update(
            target=spec,
            batch_size=pipeline.batch_size,
            stages=len(pipeline.stages),
            source=type(target.source).__name__,
            batches_per_epoch=length_of(pipeline),
        )
        unknown_why = (
            "a stream" if length_of(target.source) is None else "a filter: known once read"
        )
    if compare_floor:
        with _open_bench_target(spec, images) as fresh:
            floor = measure_floor(fresh, result["batch_size"], max(result["records"], 1))
        result["floor"] = floor
        if floor["records_per_s"] and result["records_per_s"]:
            result["fraction_of_floor"] = float(
                f"{result['records_per_s'] / floor['records_per_s']:.4g}"
            )
    if png is not None:
        from datarax.cli.charts import write_bench_chart

        rates = {"pipeline": result["records_per_s"] or 0.0}
        if compare_floor:
            rates["source only (floor)"] = result["floor"]["records_per_s"] or 0.0
        write_bench_chart(result["stats"]["ms_per_batch"], rates, png)
        result["png"] = png
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    stats = result["stats"]
    rate = result["records_per_s"]
    print(
        f"bench {spec}: {result['source']}, stages: {result['stages']}, "
        f"batch size: {result['batch_size']}"
    )
    per_epoch = result["batches_per_epoch"]
    print(
        f"batches: {result['batches']}  records: {result['records']}  batches per epoch: "
        + (str(per_epoch) if per_epoch is not None else f"unknown ({unknown_why})")
    )
    print(f"time to first batch: {result['time_to_first_batch_s']:.3f} s")
    print("records/s (after the first batch): " + (f"{rate:,.1f}" if rate else "n/a (one batch)"))
    print("ms per batch by stage (pipeline.stats()):")
    for name, ms in stats["ms_per_batch"].items():
        if ms:
            print(f"  {name:<9} {ms:10.3f}")
    idle = ("n/a (one batch: its time is start-up, compile and wait)" if result["batches"] == 1
            else "n/a (no stage timed after the first batch)")
    print(f"bottleneck: {stats['bottleneck'] or idle}")
    if compare_floor:
        floor = result["floor"]
        print(
            "source-only read (floor): "
            + (f"{floor['records_per_s']:,.1f} records/s" if floor["records_per_s"] else "n/a")
        )
        if "fraction_of_floor" in result:
            print(f"pipeline / floor: {result['fraction_of_floor']:.4g}")
    if png is not None:
        print(f"wrote chart to {png}")
    return 0
