"""W7 profile: each stage of the augmentation chain alone, jitted, on one batch.

``python -m benchmarks.w7_profile [--batch 256] [--repeats 20]``

Prints milliseconds per batch (median of ``--repeats`` calls after a warm-up) for
the uint8 -> float conversion, the random resized crop (box sampling alone and the
crop with its resampling), the flip, brightness, contrast, normalize, the whole chain
as W7 builds it, and the whole W7 epoch's pipeline step overhead is not included.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def _time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(argv=None) -> int:
    from benchmarks.augment_data import BRIGHTNESS, CONTRAST, MEAN, OUT, RATIO, SCALE, STD, make_data
    from datarax.core.keys import record_keys
    from datarax.operators import image as I

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
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
    print(f"batch {args.batch}, {jax.devices()[0].platform}; ms per batch (median of {args.repeats})")
    for name, (fn, x) in rows.items():
        ms = _time(fn, keys, repeats=args.repeats) if x is None else _time(fn, x, keys, repeats=args.repeats)
        print(f"  {name:34s} {ms:8.2f} ms  ({args.batch / ms * 1e3:9,.0f} rec/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
