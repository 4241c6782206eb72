"""Shared helpers of the operator tests: run stages through a Pipeline, by record id."""

from __future__ import annotations

import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def images(n: int = 12, size: int = 8, seed: int = 0, channels: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def pipeline(stages, data, batch_size, shuffle_seed=0, rngs_seed=0, drop_remainder=False):
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=shuffle_seed), data)
    return Pipeline(source=source, stages=stages, batch_size=batch_size,
                    rngs=nnx.Rngs(rngs_seed), drop_remainder=drop_remainder)


def by_id(pipe, field="image", epochs=1):
    """``{record id: output}`` of ``epochs`` epochs (id = the ``id`` field)."""
    out = {}
    for epoch in range(epochs):
        for batch in pipe:
            for i, rid in enumerate(np.asarray(batch["id"]).tolist()):
                out[(epoch, rid)] = np.asarray(batch[field][i])
    return out


def assert_key_invariant(make_stage, data, field="image"):
    """The same record gets the same output at other batch sizes and shuffle orders."""
    a = by_id(pipeline([make_stage()], data, batch_size=5, shuffle_seed=1), field)
    b = by_id(pipeline([make_stage()], data, batch_size=3, shuffle_seed=2), field)
    c = by_id(pipeline([make_stage()], data, batch_size=len(data["id"]), shuffle_seed=3), field)
    assert sorted(a) == sorted(b) == sorted(c) == [(0, i) for i in range(len(data["id"]))]
    for rid in a:
        np.testing.assert_array_equal(a[rid], b[rid], err_msg=f"record {rid}")
        np.testing.assert_array_equal(a[rid], c[rid], err_msg=f"record {rid}")
    return a
