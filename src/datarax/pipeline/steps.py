"""The jitted steps Pipeline runs, built once per graph structure and reused.

Steps are cached by the NNX graph definition and batch size, so re-created iterators
and equally built pipelines reuse compiled code; each is a
:func:`~datarax.core.compiled_store.stored_jit`, so other processes load it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.compiled_store import stored_jit
from datarax.core.keys import for_stages, step_key
from datarax.core.step_cache import cached
from datarax.core.stages import apply_stages
from datarax.typing import Batch

def indexed_batch(
    source: Any, stages: Any, inputs: Any, start: Any, epoch: Any, key: Any, batch_size: int,
    by_position: bool = False,
) -> tuple[Batch, Any]:
    """The batch of ``batch_size`` records at global position ``start`` after every stage,
    and their stable indices (traceable). ``by_position``: records depend on positions
    alone, so the pipeline key is passed as it is (no ``fold_in`` to compile)."""
    pipeline_key = step_key(key)
    batch_key = pipeline_key if by_position else jax.random.fold_in(pipeline_key, start)
    with source.bind_step_inputs(inputs):
        batch, indices = source.get_batch_and_indices_at(start, batch_size, batch_key)
    return apply_stages(stages, dict(batch), indices, epoch, for_stages(key)), indices


def pass_constants(*values: Any, device: Any = None) -> Any:
    """``values`` (what every call of a pass's step gets unchanged) put on ``device`` once,
    not copied per call; an ``nnx.State`` as plain dicts (JAX flattens those in C++).

    >>> import numpy as np
    >>> state, key = pass_constants({"seed": np.uint32(3)}, (np.zeros(2, np.uint32),))
    >>> type(state["seed"]).__name__, key[0].shape
    ('ArrayImpl', (2,))
    """
    plain = tuple(nnx.to_pure_dict(v) if isinstance(v, nnx.State) else v for v in values)
    return jax.device_put(plain, device)


def indexed_step(graphdef: Any, batch_size: int) -> Callable[..., tuple[Batch, Any]]:
    """Compiled ``(state, inputs, start, epoch, key) -> (batch, start + batch_size)`` for
    an indexed source + stages (the next position stays on the device)."""

    def build() -> Callable[..., tuple[Batch, Any]]:
        def step(state: Any, inputs: Any, start: Any, epoch: Any, key: Any) -> tuple[Batch, Any]:
            source, stages = nnx.merge(graphdef, state)
            batch, _ = indexed_batch(source, stages, inputs, start, epoch, key, batch_size)
            return batch, jax.lax.add(start, np.asarray(batch_size, start.dtype))

        return stored_jit(step)

    return cached(("indexed", graphdef, batch_size), build)


def grouped_step(
    graphdef: Any, batch_size: int, count: int, vectorized: bool = True,
    by_position: bool = False,
) -> Callable[..., tuple[tuple[Batch, ...], Any]]:
    """Compiled ``(state, inputs, start, epoch, key) -> ((batch, ...), next start)``: the
    ``count`` batches from ``start``, each exactly as :func:`indexed_step` computes it, in
    one dispatch. ``vectorized``: ``jax.vmap``, else ``jax.lax.map``. ``by_position``:
    without stages the group is one read."""

    def build() -> Callable[..., tuple[tuple[Batch, ...], Any]]:
        def step(state: Any, inputs: Any, start: Any, epoch: Any, key: Any) -> Any:
            return batches(state, inputs, start, epoch, key), start + count * batch_size

        def batches(state: Any, inputs: Any, start: Any, epoch: Any, key: Any) -> tuple[Batch, ...]:
            source, stages = nnx.merge(graphdef, state)
            starts = start + jnp.arange(count, dtype=start.dtype) * batch_size

            def one(at: Any) -> Batch:
                return indexed_batch(source, stages, inputs, at, epoch, key, batch_size)[0]

            if not stages and by_position:
                # the group's records are one read: a run of positions, cut into batches
                with source.bind_step_inputs(inputs):
                    run, _ = source.get_batch_and_indices_at(start, count * batch_size, None)
                return tuple(
                    jax.tree.map(lambda v, i=i: v[i * batch_size : (i + 1) * batch_size], run)
                    for i in range(count)
                )
            # one copy of the step in the program either way
            stacked = jax.vmap(one)(starts) if vectorized else jax.lax.map(one, starts)
            return tuple(jax.tree.map(lambda v, i=i: v[i], stacked) for i in range(count))

        return stored_jit(step)

    return cached(("grouped", graphdef, batch_size, count, vectorized, by_position), build)


def stage_step(graphdef: Any) -> Callable[..., Batch]:
    """Compiled ``(state, batch, indices, epoch, key) -> batch`` for host-fed stages."""

    def build() -> Callable[..., Batch]:
        def step(state: Any, batch: Batch, indices: Any, epoch: Any, key: Any) -> Batch:
            stages = nnx.merge(graphdef, state)
            return apply_stages(stages, dict(batch), indices, epoch, for_stages(key))

        return stored_jit(step)

    return cached(("stages", graphdef), build)


def runs_step(graphdef: Any, sizes: tuple[int, ...]) -> Callable[..., Batch]:
    """Compiled ``(state, inputs, starts, epoch, key) -> batch`` gathering runs of
    ``sizes`` records at ``starts`` (a re-split share), then every stage."""

    def build() -> Callable[..., Batch]:
        def step(state: Any, inputs: Any, starts: Any, epoch: Any, key: Any) -> Batch:
            source, stages = nnx.merge(graphdef, state)
            parts, indices = zip(*(indexed_batch(source, [], inputs, starts[i], epoch, key, size)
                                   for i, size in enumerate(sizes)))
            batch = jax.tree.map(lambda *v: jnp.concatenate(v), *parts)
            return apply_stages(stages, batch, jnp.concatenate(indices), epoch, for_stages(key))

        return stored_jit(step)

    return cached(("pieces", graphdef, sizes), build)
