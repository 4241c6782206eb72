"""The plain ``jax.jit`` floor of W10: what a hand-written JAX loop does, no datarax.

The images copied to the device once (``jax.device_put``, the copy every jit-based
loader makes), one permutation and the kept (even-label) rows chosen on the host per
epoch, then per batch one jitted step: gather, /255, a random horizontal flip per
record from the batch's key. The short last batch is padded to the full size and cut
on the host, so the epoch needs one program. Run with JAX's persistent compilation
cache warm (the benchmark's warm-up), its first batch is what any jit-based loader
pays on a second run: the copy, the trace and lowering (the cache is keyed by the
lowered program), the cache's load.

With ``owned=True`` (contender ``jax_floor_owned``) the floor keeps the caller's buffer
theirs, as datarax does (docs/architecture.md, "The caller's buffers stay theirs"): its
own copy of the images is made before it returns, by datarax's fastest way
(``owned_device_put``: two threads copying into memory mapped up front, which JAX then
shares). Without it, ``jax.device_put`` of the unaligned images copies them on JAX's
thread while the step is traced, and reads the caller's buffer after it returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np


def jit_epochs(images: np.ndarray, labels: np.ndarray, batch_size: int,
               seed: int, owned: bool = False,
               ) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """A function giving one shuffled epoch of the kept records per call, as
    (float images, labels) batches; ``owned``: the images copied before it returns."""
    import jax
    import jax.numpy as jnp

    if owned:
        from datarax.core.owned import owned_device_put

        data = owned_device_put(images)
    else:
        data = jax.device_put(images)

    @jax.jit
    def step(data: jax.Array, rows: jax.Array, seed: jax.Array, i: jax.Array) -> jax.Array:
        out = data[rows].astype(jnp.float32) / 255.0
        key = jax.random.fold_in(jax.random.key(seed), i)  # in the step: one program
        flips = jax.random.bernoulli(key, shape=(rows.shape[0],))
        return jnp.where(flips[:, None, None, None], out[:, :, ::-1, :], out)

    count = iter(range(1 << 30))

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        e = next(count)
        order = np.random.default_rng(seed + e).permutation(images.shape[0])
        kept = order[labels[order] % 2 == 0]
        for i, lo in enumerate(range(0, kept.shape[0], batch_size)):
            rows = kept[lo:lo + batch_size]
            padded = np.zeros(batch_size, np.int32)
            padded[:rows.shape[0]] = rows
            out = step(data, padded, np.int32(seed + e), np.int32(i))
            yield np.asarray(out)[:rows.shape[0]], labels[rows]

    return epoch
