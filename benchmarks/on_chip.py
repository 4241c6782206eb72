"""On the accelerator: what the data step costs the chip, beside plain ``jax.jit`` floors.

``python -m benchmarks.on_chip [--tiny] [--out results/on_chip_tpu.json]``

Sections (every one on the default device, each beside its floor in the same run):

* ``gather`` — plain jit floors: gathering ``batch`` rows of a ``(n, 32, 32, 3)`` uint8
  array in that layout and as ``(n, 3072)`` rows reshaped after the gather (the layout
  :class:`~datarax.sources.MemorySource` keeps, ``memory_columns.row_major``); both
  gathers return the same bytes (checked).
* ``w1`` — W1 (shuffle, /255, per-record random flip) through ``pipeline.step()`` at
  batch 256 and 1024, with and without stages, against a plain jit of the same work
  (a permutation table on the device, the flat-row gather, the same math): ms per
  batch and the ratio.
* ``chip_share`` — a training step of chained matmuls (sized to ``train_ms`` on this
  chip) alone and with the pipeline in the same loop: the data's share of the chip's
  time, ``(both - train) / both``, for W1, W7 (resized crop, flip, brightness,
  contrast, normalize over 96x96 images) and an ArrayRecord host source (W2's files
  through W1's stages).
* ``first_batch`` — W1's first batch split into source placement, the Pipeline's
  construction and the first ``next()``, beside a plain jit of the same work in the
  same process (placement, lower, compile, first run): two fresh processes, each side
  first in one (:mod:`benchmarks.first_batch_profile`).
* ``epoch_switch`` (not in the default sections; runs on CPU too) — what starting an
  epoch of ``for batch in pipeline`` costs beyond a steady ``next()``, median of many;
  W1's shuffled source (its order table made ahead) and the same source unshuffled.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit, sized_parser

SIZES = {
    "tiny": {"records": 2048, "batches": (64, 128), "steps": 8, "reps": 1, "train_ms": 1.0},
    "full": {"records": 50_000, "batches": (256, 1024), "steps": 100, "reps": 3, "train_ms": 5.0},
}


def _ms_per_call(fn: Any, steps: int, reps: int) -> float:
    """Fastest of ``reps`` runs of ``steps`` back-to-back calls, in ms per call (the
    outputs waited for once at the end, as a training loop would)."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(reps):
        began = time.perf_counter()
        jax.block_until_ready([fn() for _ in range(steps)])
        best = min(best, (time.perf_counter() - began) / steps)
    return 1000 * best


def gather(records: int, batches: tuple[int, ...], steps: int, reps: int) -> dict[str, Any]:
    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    nhwc = jax.device_put(images)
    rows = jax.device_put(images.reshape(records, -1))
    take4 = jax.jit(lambda a, i: a[i])
    take2 = jax.jit(lambda a, i: a[i].reshape(i.shape[0], 32, 32, 3))
    out: dict[str, Any] = {}
    for batch in batches:
        idx = jax.device_put(np.random.default_rng(1).permutation(records)[:batch].astype(np.int32))
        same = bool(np.array_equal(np.asarray(take4(nhwc, idx)), np.asarray(take2(rows, idx))))
        t4 = _ms_per_call(lambda: take4(nhwc, idx), steps, reps)
        t2 = _ms_per_call(lambda: take2(rows, idx), steps, reps)
        out[str(batch)] = {"nhwc_ms": t4, "rows_ms": t2, "rows_speedup": t4 / t2, "checks_ok": same}
    return out


def _w1_floor_parts(images: np.ndarray, batch: int, stages: bool, feistel: bool = False,
                    gather: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """A plain jit of W1's work, best layout: ``(step, (rows, perm, labels))``, the batch
    at position ``start`` being ``step(rows, perm, labels, start)``. The order is a
    permutation table on the device (read with ``dynamic_slice``, or with ``gather``
    gathered at the positions), or with ``feistel`` the same Feistel permutation
    datarax computes inside its step (no table); the flip keys come from
    ``jax.random.key(0)`` made inside the step (no program of its own)."""
    from datarax.samplers.index_shuffle import epoch_permutation_jnp

    n = len(images)
    rows = jax.device_put(images.reshape(n, -1))
    perm = jax.device_put(np.random.default_rng(2).permutation(n).astype(np.int32))
    labels = jax.device_put(np.arange(n, dtype=np.int32))

    @jax.jit
    def step(rows: Any, perm: Any, labels: Any, start: Any) -> Any:
        if feistel:
            idx = epoch_permutation_jnp(jnp.arange(batch, dtype=jnp.int32) + start, n, np.uint32(7))
        elif gather:  # the positions' records gathered from the table, as datarax reads it
            at = jnp.clip(jnp.arange(batch, dtype=jnp.int32) + start % n, 0, n - 1)
            idx = perm[at]
        else:
            idx = jax.lax.dynamic_slice(perm, (start % (perm.shape[0] - batch + 1),), (batch,))
        image = rows[idx].reshape(batch, 32, 32, 3)
        if stages:
            key = jax.random.key(0)
            image = image / 255.0
            keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(idx)
            flips = jax.vmap(jax.random.bernoulli)(keys)
            image = jnp.where(flips[:, None, None, None], image[:, :, ::-1], image)
        return {"image": image, "label": labels[idx]}

    return step, (rows, perm, labels)


def _w1_floor(images: np.ndarray, batch: int, stages: bool, feistel: bool = False) -> Any:
    """:func:`_w1_floor_parts` as ``next_batch()``: each call the next position."""
    step, args = _w1_floor_parts(images, batch, stages, feistel)
    position = [0]

    def next_batch() -> Any:
        position[0] += batch
        return step(*args, position[0])

    return next_batch


def _w1_floor_epochs(images: np.ndarray, batch: int, stages: bool) -> Any:
    """The plain jit of :func:`_w1_floor` over real epochs, as datarax serves them: each
    epoch a new permutation (NumPy, on the host) put on the device, the epoch's batches
    read from it with ``dynamic_slice``, and its short last batch cut from a full one."""
    n = len(images)
    step, (rows, _, labels) = _w1_floor_parts(images, batch, stages)
    state = {"epoch": -1, "at": n, "perm": None}
    rng = np.random.default_rng(3)

    def next_batch() -> Any:
        if state["at"] >= n:  # a new epoch: a new order on the device
            order = rng.permutation(n).astype(np.int32)
            state["perm"] = jax.device_put(np.concatenate([order, order[:batch]]))
            state["at"] = 0
        at = state["at"]
        state["at"] += batch
        out = step(rows, state["perm"], labels, at)
        if at + batch > n:  # the short last batch
            out = jax.tree.map(lambda v: v[: n - at], out)
        return out

    return next_batch


def _w1_pipeline(images: np.ndarray, batch: int, stages: bool, prefetch: int = 2,
                 shuffle: bool = True) -> Any:
    from flax import nnx

    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=0),
                          {"image": images, "label": np.arange(len(images), dtype=np.int32)})
    ops = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
           ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)] if stages else []
    return Pipeline(source=source, stages=ops, batch_size=batch, rngs=nnx.Rngs(0),
                    prefetch=prefetch)


def w1(records: int, batches: tuple[int, ...], steps: int, reps: int) -> dict[str, Any]:
    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    out: dict[str, Any] = {}
    for batch in batches:
        for stages in (True, False):
            pipeline = _w1_pipeline(images, batch, stages)
            first = pipeline.step()
            ok = first["image"].shape == (batch, 32, 32, 3)
            t_ours = _ms_per_call(pipeline.step, steps, reps)
            endless = _endless(lambda: _w1_pipeline(images, batch, stages))
            t_iter = _ms_per_call(lambda: next(endless), steps, reps)
            inline = _endless(lambda: _w1_pipeline(images, batch, stages, prefetch=0))
            t_inline = _ms_per_call(lambda: next(inline), steps, reps)
            t_floor = _ms_per_call(_w1_floor(images, batch, stages), steps, reps)
            t_feistel = _ms_per_call(_w1_floor(images, batch, stages, feistel=True), steps, reps)
            t_epochs = _ms_per_call(_w1_floor_epochs(images, batch, stages), steps, reps)
            out[f"{batch}{'' if stages else '_no_stages'}"] = {
                "datarax_step_ms": t_ours, "datarax_iter_ms": t_iter,
                "datarax_iter_prefetch0_ms": t_inline, "plain_jit_ms": t_floor,
                "plain_jit_feistel_ms": t_feistel, "plain_jit_epochs_ms": t_epochs,
                "datarax_vs_plain_jit_epochs": t_epochs / min(t_ours, t_iter, t_inline),
                "datarax_vs_plain_jit": min(t_floor, t_feistel) / min(t_ours, t_iter),
                "iter_vs_plain_jit": min(t_floor, t_feistel) / t_iter,
                "checks_ok": bool(ok),
            }
    return out


def _endless(make: Any) -> Any:
    """Batches of ``for batch in pipeline``, epoch after epoch."""
    pipeline = make()
    while True:
        yield from pipeline


@functools.lru_cache(maxsize=None)  # calibrated once per shape: each depth tried compiles
def _train_step(train_ms: float, batch: int, features: int) -> tuple[Any, Any]:
    """A jitted step of chained (batch, w) @ (w, w) matmuls with ``w`` chosen so that one
    step takes about ``train_ms`` on this device; returns ``(step, params)``."""
    width = 4096
    params = {"in": jnp.ones((features, width), jnp.bfloat16) * 1e-3,
              "sq": jnp.eye(width, dtype=jnp.bfloat16)}

    def make(depth: int) -> Any:
        @jax.jit
        def step(params: Any, image: Any) -> Any:
            h = image.reshape(image.shape[0], -1).astype(jnp.bfloat16) @ params["in"]
            for _ in range(depth):
                h = jnp.tanh(h @ params["sq"])
            return h.astype(jnp.float32).mean()
        return step

    fixed = jnp.zeros((batch, features), jnp.float32)
    depth, step = 1, make(1)
    for _ in range(12):  # grow the depth until a step costs train_ms
        t = _ms_per_call(lambda: step(params, fixed), 20, 2)
        if t >= train_ms:
            break
        depth = min(256, max(depth + 1, int(depth * train_ms / max(t, 1e-3))))
        step = make(depth)
    return step, params


def _share(make_pipeline: Any, batch: int, features: int, steps: int, reps: int,
           train_ms: float) -> dict[str, Any]:
    train, params = _train_step(train_ms, batch, features)
    pipeline = make_pipeline()
    fixed = pipeline.step()
    t_train = _ms_per_call(lambda: train(params, fixed["image"]), steps, reps)
    t_data = _ms_per_call(pipeline.step, steps, reps)
    t_both = _ms_per_call(lambda: train(params, pipeline.step()["image"]), steps, reps)
    return {"train_ms": t_train, "data_alone_ms": t_data, "both_ms": t_both,
            "data_share": max(0.0, (t_both - t_train) / t_both)}


def chip_share(records: int, steps: int, reps: int, train_ms: float) -> dict[str, Any]:
    """The data's share of the chip beside a train step: W1, and W7's and the ArrayRecord
    host source's pipelines as :mod:`benchmarks.device_check` makes them."""
    from benchmarks.device_check import _augmented_pipeline, _host_pipeline

    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    out: dict[str, Any] = {"w1": _share(lambda: _w1_pipeline(images, 256, True), 256, 3072,
                                        steps, reps, train_ms)}
    out["w7"] = _share(_augmented_pipeline(max(records // 10, 1024), 256), 256,
                       64 * 64 * 3, steps, reps, train_ms)
    try:
        out["array_record_host"] = _share(_host_pipeline(records, 256), 256, 3072, steps, reps,
                                          train_ms)
    except ImportError as err:
        out["array_record_host"] = {"skipped": str(err)}
    return out


def _dispatch_call(pipeline: Any) -> tuple[Any, tuple[Any, ...], int]:
    """The executable of ``pipeline``'s first pass and its constant arguments:
    ``(executable, (state, inputs, epoch, key), batch)``."""
    iterator = iter(pipeline)
    jax.block_until_ready(next(iterator))
    d = iterator._driver.dispatch  # our own iterator's pass: the program it calls per batch
    start = np.int32(d.batch_size)
    return d.step.executable(d.state, d.inputs, start, d.epoch_arg, d.key), (
        d.state, d.inputs, d.epoch_arg, d.key), d.batch_size


def w1_program(records: int, batches: tuple[int, ...], steps: int, reps: int) -> dict[str, Any]:
    """W1's compiled work alone, called back to back without the iterator: datarax's
    step (as its pass calls it; with its order table or the Feistel cipher in the step;
    the position a NumPy scalar or already on the device) beside the plain jit (a
    permutation table read with ``dynamic_slice`` or gathered like datarax's; the
    position a Python int or on the device), with each one's lower + compile seconds."""
    import datarax.sources.memory as memory

    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    out: dict[str, Any] = {}
    for batch in batches:
        row: dict[str, Any] = {}
        starts = [np.int32(batch * (1 + i % (records // batch - 2))) for i in range(steps)]
        placed = [jax.device_put(v) for v in starts]
        for order, table_max in (("table", memory.SHUFFLE_TABLE_MAX), ("feistel", 0)):
            saved = memory.SHUFFLE_TABLE_MAX
            memory.SHUFFLE_TABLE_MAX = table_max
            try:
                t = time.perf_counter()
                call, (state, inputs, epoch, key), _ = _dispatch_call(
                    _w1_pipeline(images, batch, True, prefetch=0))
                row[f"datarax_{order}_first_s"] = time.perf_counter() - t
            finally:
                memory.SHUFFLE_TABLE_MAX = saved
            for where, values in (("numpy", starts), ("device", placed)):
                at = iter(values * (3 * reps + 3))
                row[f"datarax_{order}_{where}_start_ms"] = _ms_per_call(
                    lambda: call(state, inputs, next(at), epoch, key), steps, reps)
        for variant in ("slice", "gather"):
            step, args = _w1_floor_parts(images, batch, True, gather=variant == "gather")
            t = time.perf_counter()
            compiled = step.lower(*args, starts[0]).compile()
            row[f"floor_{variant}_compile_s"] = time.perf_counter() - t
            for where, values in (("numpy", starts), ("device", placed)):
                at = iter(values * (3 * reps + 3))
                row[f"floor_{variant}_{where}_start_ms"] = _ms_per_call(
                    lambda: compiled(*args, next(at)), steps, reps)
        out[str(batch)] = row
    return out


def first_batch(records: int, batch: int, repeats: int = 2) -> dict[str, Any]:
    """W1's first batch split into its parts beside a plain jit of the same work
    (:mod:`benchmarks.first_batch_profile`), in fresh processes with an empty store of
    compiled steps: datarax first, then the floor first (the second side of a process
    gets a warm runtime), ``repeats`` times alternating; datarax first again over the
    first one's store (a second run of the same program); and each side first with
    XLA's least ``exec_time_optimization_effort`` (a compile-time lever).
    ``summary``: the medians of each side when first and when second, and their ratios."""
    import tempfile

    out: dict[str, Any] = {}
    runs = [(f"{first}_first_{i}", first, f"{first}{i}", None)
            for i in range(repeats) for first in ("datarax", "floor")]
    runs += [("datarax_first_stored", "datarax", "datarax0", None),
             ("datarax_first_effort", "datarax", "effort_d", -1.0),
             ("floor_first_effort", "floor", "effort_f", -1.0)]
    with tempfile.TemporaryDirectory() as stores:
        for name, first, store, effort in runs:
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
            env["DATARAX_COMPILE_CACHE_DIR"] = str(Path(stores) / store)
            command = [sys.executable, "-m", "benchmarks.first_batch_profile", "--records",
                       str(records), "--batch", str(batch), "--first", first]
            done = subprocess.run(
                command + ([] if effort is None else ["--effort", str(effort)]),
                env=env, capture_output=True, text=True, timeout=600,
                cwd=Path(__file__).resolve().parents[1])
            if done.returncode != 0:
                out[name] = {"error": done.stderr[-2000:]}
                continue
            out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    plain = [out[f"{f}_first_{i}"] for i in range(repeats) for f in ("datarax", "floor")]
    plain = [r for r in plain if "error" not in r]

    def median(side: str, first: bool) -> float:
        return float(np.median([r[side]["first_batch_s"] for r in plain
                                if (r["first"] == side) == first] or [np.nan]))

    summary = {f"{side}_{when}_s": median(side, when == "first")
               for side in ("datarax", "floor") for when in ("first", "second")}
    summary["ratio_each_first"] = summary["datarax_first_s"] / summary["floor_first_s"]
    summary["ratio_each_second"] = summary["datarax_second_s"] / summary["floor_second_s"]
    out["summary"] = summary
    return out


def w1_profile(records: int, batch: int, calls: int = 300) -> dict[str, Any]:
    """Where one ``next()`` of W1 spends its time on the loop's thread (``prefetch=0``:
    every part of it runs there): cProfile's top functions by own time, microseconds per
    call, beside the ms per call of the same loop unprofiled."""
    import cProfile
    import pstats

    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    endless = _endless(lambda: _w1_pipeline(images, batch, True, prefetch=0))
    plain_ms = _ms_per_call(lambda: next(endless), calls, 1)
    profile = cProfile.Profile()
    profile.enable()
    jax.block_until_ready([next(endless) for _ in range(calls)])
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(((v[2], v[3], v[1], f"{Path(k[0]).name}:{k[1]}({k[2]})")
                   for k, v in stats.items()), reverse=True)[:25]
    return {"ms_per_call": plain_ms, "top_own_us": [
        {"fn": name, "own_us": 1e6 * own / calls, "cum_us": 1e6 * cum / calls,
         "calls_per_next": n / calls} for own, cum, n, name in rows]}


def epoch_switch(records: int, batch: int, epochs: int = 40, prefetch: int = 2,
                 shuffle: bool = True, orders: str = "ahead") -> dict[str, Any]:
    """What starting an epoch costs the loop (CPU-runnable): per epoch of ``for batch in
    pipeline`` over W1 (``shuffle=False``: its source unshuffled), the first ``next()``
    (with its ``iter()``) minus the epoch's median ``next()``; the median and quartiles
    over ``epochs`` epochs (the first two, which compile, left out). ``orders`` (a
    shuffled source): ``"ahead"`` made ahead as soon as the pass asks, ``"delayed"``
    3 ms after (the library's default from ``order_tables.DELAY_FROM`` records),
    ``"premade"`` every epoch's order made and placed before the run (no order work left
    in it: the floor of this part)."""
    from datarax.sources import order_tables

    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    pipeline = _w1_pipeline(images, batch, True, prefetch=prefetch, shuffle=shuffle)
    saved = order_tables.KEEP, order_tables.AHEAD_DELAY_S, order_tables.DELAY_FROM
    order_tables.AHEAD_DELAY_S, order_tables.DELAY_FROM = (0.003, 0) if orders == "delayed" else (0.0, 0)
    if orders == "premade" and shuffle:
        order_tables.KEEP = epochs + 8
        seed = int(pipeline.source.permutation_seed.get_value())
        for epoch in range(epochs + 3):
            args = (records, (seed + epoch) % 2**32, np.int32(epoch * records))
            order_tables.placed_order_ahead(*args)
            order_tables.placed_order(*args)
    try:
        return _epoch_switch(pipeline, epochs, records, batch, prefetch, shuffle, orders)
    finally:
        order_tables.KEEP, order_tables.AHEAD_DELAY_S, order_tables.DELAY_FROM = saved


def _epoch_switch(pipeline: Any, epochs: int, records: int, batch: int, prefetch: int,
                  shuffle: bool, orders: str) -> dict[str, Any]:
    switch, steady = [], []
    for epoch in range(epochs + 2):
        began = time.perf_counter()
        iterator = iter(pipeline)
        jax.block_until_ready(next(iterator))
        first = time.perf_counter() - began
        times = []
        while True:
            began = time.perf_counter()
            try:
                jax.block_until_ready(next(iterator))
            except StopIteration:
                break
            times.append(time.perf_counter() - began)
        if epoch >= 2:
            steady.append(float(np.median(times)))
            switch.append(first - steady[-1])
    q1, median, q3 = np.percentile(switch, [25, 50, 75]) * 1000
    return {"switch_ms": float(median), "switch_q1_ms": float(q1), "switch_q3_ms": float(q3),
            "steady_next_ms": 1000 * float(np.median(steady)), "epochs": epochs,
            "batches_per_epoch": -(-records // batch), "prefetch": prefetch, "shuffle": shuffle,
            "orders": orders}


def run(size: str, sections: tuple[str, ...]) -> dict[str, Any]:
    s = SIZES[size]
    report: dict[str, Any] = {"size": size, "backend": jax.default_backend(),
                              "devices": [str(d) for d in jax.devices()]}
    if "gather" in sections:
        report["gather"] = gather(s["records"], s["batches"], s["steps"], s["reps"])
    if "w1" in sections:
        report["w1"] = w1(s["records"], s["batches"], s["steps"], s["reps"])
    if "w1_program" in sections:
        report["w1_program"] = w1_program(s["records"], s["batches"], s["steps"], s["reps"])
    if "w1_profile" in sections:
        report["w1_profile"] = {str(b): w1_profile(s["records"], b, 3 * s["steps"])
                                for b in s["batches"]}
    if "epoch_switch" in sections:
        kinds = (("ahead", True), ("delayed", True), ("premade", True), ("unshuffled", False))
        report["epoch_switch"] = {
            f"{b}_prefetch{p}_{orders}": epoch_switch(
                s["records"], b, prefetch=p, shuffle=shuffle, orders=orders)
            for b in s["batches"] for p in (0, 2) for orders, shuffle in kinds}
    if "chip_share" in sections:
        report["chip_share"] = chip_share(s["records"], s["steps"], s["reps"], s["train_ms"])
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sized_parser(__doc__, "gather,w1,chip_share,first_batch").parse_args(argv)
    sections = tuple(args.sections.split(","))
    size = "tiny" if args.tiny else "full"
    # first: its fresh process must own the device (a TPU is held by one process)
    first = first_batch(SIZES[size]["records"], SIZES[size]["batches"][0]) if "first_batch" in sections else None
    report = run(size, tuple(s for s in sections if s != "first_batch"))
    if first is not None:
        report["first_batch"] = first
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
