"""A Pipeline through NNX's graph functions: ``nnx.clone`` and ``nnx.merge`` build a new
pipeline object from a graph definition that holds the original's bookkeeping."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import StaleIteratorError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def make() -> Pipeline:
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                       {"x": np.arange(11, dtype=np.int32)})
    return Pipeline(source=src, batch_size=3, seed=0)


def xs(batches):
    return [np.asarray(b["x"]).tolist() for b in batches]


@pytest.fixture(scope="module")
def two_epochs():
    p = make()
    return xs(p) + xs(p)


@pytest.mark.parametrize("build", ["clone", "merge_kept_state"])
def test_a_copy_made_mid_epoch_continues_it_and_leaves_the_original_live(build, two_epochs):
    p = make()
    it = iter(p)
    first = xs([next(it), next(it)])
    if build == "clone":
        copy = nnx.clone(p)
    else:  # the docs' way to keep a state: a copy of nnx.state, merged back later
        graphdef, state = nnx.split(p)
        copy = nnx.merge(graphdef, jax.tree.map(np.array, state))
    assert (copy.epoch, copy.position) == (0, 6)
    assert first + xs(copy) + xs(copy) == two_epochs  # the rest of epoch 0, then epoch 1
    assert first + xs(it) == two_epochs[:4]  # the original's pass was not ended


def test_a_merge_of_the_live_state_is_the_same_pipeline():
    p = make()
    it = iter(p)
    next(it)
    alias = nnx.merge(*nnx.split(p))  # the same Variables: one position, one live pass
    assert alias.source.datarax_position.index_var is p.source.datarax_position.index_var
    next(iter(alias))
    with pytest.raises(StaleIteratorError):
        next(it)
