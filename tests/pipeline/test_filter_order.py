"""A filtered pass's batches, pinned: the records the unfiltered pipeline hands out, in
its order, those the predicate keeps, cut into full batches; and the first batch of each
epoch (order and draws) as it was when packing moved from a running sum and a scatter to
a stable sort."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def _noise(el, key):
    return {**el.data, "u": jax.random.randint(key, (), 0, 100)}


def _even(el):
    return el.data["x"] % 2 == 0


def _pipeline(n, batch_size, at=None):
    """Shuffled ``arange(n)`` through a stochastic stage, with the filter at ``at``
    (0: before the stage, 1: after it; None: no filter)."""
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                          {"x": np.arange(n, dtype=np.int32)})
    stages = [ElementOperator(fn=_noise, stochastic=True)]
    if at is not None:
        stages.insert(at, FilterOperator(predicate=_even))
    return Pipeline(source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(3))


def _epoch(pipeline):
    return [(np.asarray(b["x"]).tolist(), np.asarray(b["u"]).tolist()) for b in pipeline]


#: the first batch of each of the first two epochs, filter first (records read by position)
PINNED = [([80, 32, 20, 30, 40, 36, 48], [41, 87, 95, 12, 67, 43, 61]),
          ([72, 82, 12, 18, 22, 78, 64], [51, 60, 3, 36, 32, 20, 41])]
N, SIZE = 90, 7


@pytest.fixture(scope="module")
def unfiltered():
    """The first two epochs of the pipeline without the filter."""
    plain = _pipeline(N, SIZE)
    return [_epoch(plain) for _ in range(2)]


@pytest.mark.parametrize("at", [0, 1])
def test_filtered_batches_are_the_unfiltered_records_kept_in_order(at, unfiltered):
    """Both packing paths (records read by position, and a stage before the filter),
    over a pass where kept records straddle the chunks read, two epochs (two orders)."""
    filtered = _pipeline(N, SIZE, at=at)
    for epoch, pinned in zip(unfiltered, PINNED):
        records = [r for x, u in epoch for r in zip(x, u) if r[0] % 2 == 0]
        want = [records[i:i + SIZE] for i in range(0, len(records), SIZE)]
        got = _epoch(filtered)
        assert [list(zip(x, u)) for x, u in got] == want
        assert got[0] == pinned


@pytest.mark.parametrize("size", [1, 8, 5])
def test_kept_records_keep_their_order_at_every_chunk_size(size):
    """The chunk a filtered step packs is ``batch_size`` records: its kept rows stay in
    order whether that size is 1, a power of two or neither, by position (filter first)
    and after a stage."""
    n = 23
    plain = [r for x, u in _epoch(_pipeline(n, size)) for r in zip(x, u) if r[0] % 2 == 0]
    for at in (0, 1):
        got = [r for x, u in _epoch(_pipeline(n, size, at=at)) for r in zip(x, u)]
        assert got == plain
