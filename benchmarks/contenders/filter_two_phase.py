"""A two-phase plain-JAX W10 loader: the filter a library can run, with no datarax.

What :mod:`benchmarks.contenders.filter_jit`'s owned floor does, but honouring what a
library must: the predicate is a traced JAX function of the record (``label % 2 == 0``
written with ``jnp``; it is handed the whole record, image and label, and XLA drops the
parts it does not read), never numpy on the host's labels. Per epoch:

1. one jitted program evaluates the predicate over the whole shuffled order at once
   (vectorised over all N records) and gives the kept positions: the host packs them
   from the returned mask (``compact="host"``: ``order[mask]``, as the floor's rows), or
   the program packs them on the device (``compact="device"``: ``jnp.nonzero(size=N)``,
   padded by one batch; they stay there, the host reads only their count);
2. per batch, one jitted step: its ``batch_size`` rows (``kept[i * batch_size + iota]``
   on the device, or given by the host; the short last batch padded and cut on the host),
   a gather of those records, /255 and the random flip, with the floor's per-batch key
   (``fold_in(key(seed), batch index)``).

``host`` is the benchmark's ``jax_two_phase``: at load ~1.3, eight alternating pairs of
fresh processes, its whole epoch took 165 ms against ``device``'s 183 (first batch 119
against 139: ``nonzero``'s program costs ~20 ms more to trace, lower and load), steady
epochs equal. A ``dynamic_slice`` of the packed rows in the step (instead of the gather
by index) ran the step ~5x slower: XLA:CPU fuses the slice into the loop over every value.

The images and labels are copied before it returns (``owned_device_put_all``, as the
owned floor copies the images): the caller's buffers stay theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

Epoch = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


def even_label(record: dict[str, Any]) -> Any:
    """W10's predicate as a library receives it: a JAX function of one record."""
    return record["label"] % 2 == 0


def programs(batch_size: int, predicate: Callable[[dict[str, Any]], Any] = even_label,
             ) -> dict[str, Callable[..., Any]]:
    """The jitted programs, each called as ``(images, labels, ...)``: phase 1
    ``choose_on_device(order) -> (kept rows first, padded by a batch; count)`` or
    ``keeps(order) -> mask``; phase 2 ``step_from_kept(kept, seed, i)`` (batch ``i`` of
    the packed rows) or ``step_from_rows(rows, seed, i) -> (float images, labels)``."""
    import jax
    import jax.numpy as jnp

    def keeps(data: jax.Array, marks: jax.Array, order: jax.Array) -> jax.Array:
        return jax.vmap(lambda r: predicate({"image": data[r], "label": marks[r]}))(order)

    def choose_on_device(data: jax.Array, marks: jax.Array, order: jax.Array,
                         ) -> tuple[jax.Array, jax.Array]:
        mask = keeps(data, marks, order)
        (at,) = jnp.nonzero(mask, size=order.shape[0], fill_value=0)
        return jnp.pad(order[at], (0, batch_size)), mask.sum(dtype=jnp.int32)

    def step_from_rows(data: jax.Array, marks: jax.Array, rows: jax.Array, seed: jax.Array,
                       i: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = data[rows].astype(jnp.float32) / 255.0
        key = jax.random.fold_in(jax.random.key(seed), i)
        flips = jax.random.bernoulli(key, shape=(rows.shape[0],))
        return jnp.where(flips[:, None, None, None], out[:, :, ::-1, :], out), marks[rows]

    def step_from_kept(data: jax.Array, marks: jax.Array, kept: jax.Array, seed: jax.Array,
                       i: jax.Array) -> tuple[jax.Array, jax.Array]:
        # a gather, not dynamic_slice (fused into the loop over every value: ~5x slower)
        rows = kept[i * batch_size + jnp.arange(batch_size, dtype=i.dtype)]
        return step_from_rows(data, marks, rows, seed, i)

    return {f.__name__: jax.jit(f) for f in (choose_on_device, keeps, step_from_kept,
                                            step_from_rows)}


def two_phase_epochs(images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int,
                     predicate: Callable[[dict[str, Any]], Any] = even_label,
                     compact: str = "host") -> Epoch:
    """A function giving one shuffled epoch of the records ``predicate`` keeps per call,
    as (float images, labels) batches; ``compact``: where the kept positions are packed
    ("device" or "host")."""
    from datarax.core.owned import owned_device_put_all

    if compact not in ("device", "host"):
        raise ValueError(f"compact must be 'device' or 'host', got {compact!r}")
    data, marks = owned_device_put_all([images, labels])
    n = images.shape[0]
    jitted = programs(batch_size, predicate)
    choose_on_device, choose_mask = jitted["choose_on_device"], jitted["keeps"]
    step_from_kept, step_from_rows = jitted["step_from_kept"], jitted["step_from_rows"]
    count = iter(range(1 << 30))

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        e = next(count)
        order = np.random.default_rng(seed + e).permutation(n).astype(np.int32)
        s = np.int32(seed + e)
        if compact == "device":  # the packed rows stay on the device; the host reads the count
            kept, total = choose_on_device(data, marks, order)
            total = int(total)
            for i, lo in enumerate(range(0, total, batch_size)):
                out, label = step_from_kept(data, marks, kept, s, np.int32(i))
                m = min(batch_size, total - lo)
                yield np.asarray(out)[:m], np.asarray(label)[:m]
            return
        kept_rows = order[np.asarray(choose_mask(data, marks, order))]  # the mask, packed here
        for i, lo in enumerate(range(0, kept_rows.shape[0], batch_size)):
            rows = kept_rows[lo:lo + batch_size]
            padded = np.zeros(batch_size, np.int32)
            padded[:rows.shape[0]] = rows
            out, label = step_from_rows(data, marks, padded, s, np.int32(i))
            yield np.asarray(out)[:rows.shape[0]], np.asarray(label)[:rows.shape[0]]

    return epoch
