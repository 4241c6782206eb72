"""W7 profile: each stage of the augmentation chain alone, jitted, on one batch.

``python -m benchmarks.w7_profile [--batch 256] [--repeats 30] [--trace]``

Prints milliseconds per batch (median of ``--repeats`` calls after a warm-up) for
the uint8 -> float conversion, the random resized crop (box sampling alone and the
crop with its resampling, on float and on uint8 images), the flip, brightness,
contrast, normalize, and the whole chain as W7 builds it (the pipeline around it is
not included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp


def _time(fn, *args, repeats: int) -> tuple[float, float]:
    """Median wall and process-CPU milliseconds per call (CPU time is steadier when
    other jobs share the cores; XLA:CPU may use more than one thread, so CPU >= wall)."""
    jax.block_until_ready(fn(*args))
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main(argv=None) -> int:
    from benchmarks.augment_data import (
        BRIGHTNESS, CONTRAST, MEAN, OUT, RATIO, SCALE, STD, make_data,
    )
    from datarax.core.keys import record_keys
    from datarax.operators import image as I

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--trace", action="store_true",
                        help="also list the whole chain's costliest XLA ops (jax.profiler)")
    args = parser.parse_args(argv)
    images, _ = make_data(args.batch)
    u8 = jnp.asarray(images)
    keys = record_keys(jax.random.key(0), 0, jnp.arange(args.batch))
    to_float = I.Normalize([0.0] * 3, [1.0] * 3)
    rrc = I.RandomResizedCrop(OUT, scale=SCALE, ratio=RATIO)
    flip, bright = I.HorizontalFlip(0.5), I.Brightness(BRIGHTNESS)
    contrast, norm = I.Contrast(CONTRAST), I.Normalize(MEAN.tolist(), STD.tolist())
    f96 = jax.jit(lambda x: to_float.apply_batch({"image": x}, None)["image"])(u8)
    f64 = f96[:, :OUT, :OUT]

    def stage(op, x):
        return jax.jit(lambda d, k: op.apply_batch({"image": d}, k)["image"]), x

    def chain(d, k):
        batch = {"image": d}
        for op in (to_float, rrc, flip, bright, contrast, norm):
            batch = op.apply_batch(batch, k if op.config.stochastic else None)
        return batch["image"]

    rows = {
        "uint8 -> float (96x96)": stage(to_float, u8),
        "rrc box sampling only": (jax.jit(jax.vmap(lambda k: jnp.stack(rrc.box(k, 96, 96)))), None),
        "random resized crop (float in)": stage(rrc, f96),
        "random resized crop (uint8 in)": stage(rrc, u8),
        "flip p=0.5 (64x64)": stage(flip, f64),
        "brightness (64x64)": stage(bright, f64),
        "contrast (64x64)": stage(contrast, f64),
        "normalize (64x64)": stage(norm, f64),
        "whole chain": (jax.jit(chain), u8),
    }
    print(f"batch {args.batch}, {jax.devices()[0].platform}, load {os.getloadavg()[0]:.2f}; "
          f"ms per batch, median of {args.repeats}: wall, process CPU")
    for name, (fn, x) in rows.items():
        call = (fn, keys) if x is None else (fn, x, keys)
        wall, cpu = _time(*call, repeats=args.repeats)
        print(f"  {name:34s} {wall:8.2f} {cpu:8.2f}  ({args.batch / wall * 1e3:9,.0f} rec/s wall)")
    if args.trace:
        print("whole chain, XLA ops by time (ms per batch, summed over threads):")
        for name, ms in _trace(rows["whole chain"][0], u8, keys, repeats=args.repeats)[:8]:
            print(f"  {name:34s} {ms:8.2f}")
    return 0


def _trace(fn, *args, repeats: int) -> list[tuple[str, float]]:
    """``(op, ms per call)`` of the compiled program's ops, from a jax.profiler trace."""
    import collections
    import glob
    import gzip
    import tempfile

    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(repeats):
                jax.block_until_ready(fn(*args))
        (path,) = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
        events = json.load(gzip.open(path))["traceEvents"]
    total: collections.Counter = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if event.get("ph") == "X" and ("fusion" in name or name.startswith(("cond", "while"))):
            total[name] += event.get("dur", 0) / 1e3 / repeats
    return total.most_common()


if __name__ == "__main__":
    raise SystemExit(main())
