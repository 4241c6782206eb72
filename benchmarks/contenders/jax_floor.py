"""The JAX floor: the least a JAX program does for the vision work, no loader.

A host-side shuffle and gather (NumPy), one ``jax.device_put`` per batch and one
``jax.jit`` function that flips half the records and scales to float32, keyed by
``jax.random.fold_in(key, batch)``. No state, no resume, no checks, no read-ahead.

Its first batch is what any JAX loader pays before its first result in a fresh process:
JAX's first trace, lowering and (with the persistent compilation cache warm) the
executable's load — the lower bound for a first batch that goes through ``jax.jit``.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np


def versions() -> dict[str, str]:
    return {"jax": jax.__version__, "numpy": np.__version__}


def flip_normalize(raw: jax.Array, key: jax.Array, batch: jax.Array) -> jax.Array:
    """W1's work on one batch of raw ``uint8`` images (not jitted): half the records
    flipped left-right (keyed by ``fold_in(key, batch)``), scaled to float32 in [0, 1]."""
    keys = jax.random.split(jax.random.fold_in(key, batch), raw.shape[0])
    flip = jax.vmap(jax.random.bernoulli)(keys)
    flipped = jnp.where(flip[:, None, None, None], raw[:, :, ::-1, :], raw)
    return flipped.astype(jnp.float32) / 255.0


def vision_epoch(images: np.ndarray, labels: np.ndarray, spec) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    step = jax.jit(flip_normalize)
    key = jax.random.key(spec.seed)
    order = np.random.default_rng(spec.seed).permutation(images.shape[0])
    for b, start in enumerate(range(0, order.size, spec.batch_size)):
        idx = order[start:start + spec.batch_size]
        out = step(jax.device_put(images[idx]), key, b)
        yield np.asarray(out), labels[idx]
