"""``Pipeline(..., seed=s)``: an int instead of ``rngs=nnx.Rngs(s)``, same batches."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def _noisy(el, key):
    return el.update_data({"x": el.data["x"] + jax.random.uniform(key)})


def _pipeline(**seeding):
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                          {"x": np.arange(10, dtype=np.float32)})
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noisy)]
    return Pipeline(source=source, stages=stages, batch_size=4, **seeding)


def _epochs(pipeline, count=2):
    return [np.asarray(b["x"]).tobytes() for _ in range(count) for b in pipeline]


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 - 1])
def test_a_seed_serves_the_batches_of_rngs_of_that_seed(seed):
    assert _epochs(_pipeline(seed=seed)) == _epochs(_pipeline(rngs=nnx.Rngs(seed)))


def test_other_seeds_other_batches_and_a_seeded_state_restores():
    assert _epochs(_pipeline(seed=1)) != _epochs(_pipeline(seed=2))
    pipeline = _pipeline(seed=3)
    state = pipeline.get_state()
    other = _pipeline(rngs=nnx.Rngs(3))
    other.set_state(state)  # the same key: a state of one restores into the other
    assert _epochs(other, 1) == _epochs(pipeline, 1)


def test_a_seed_warns_about_nothing(recwarn):
    _pipeline(seed=0)
    assert [str(w.message) for w in recwarn if "rngs" in str(w.message)] == []


@pytest.mark.parametrize("seed, message", [
    (-1, r"Pipeline seed must be in \[0, 2\*\*32\), got -1\."),
    (2**32, r"Pipeline seed must be in \[0, 2\*\*32\), got 4294967296\."),
    (1.5, r"Pipeline seed must be an int, got float 1\.5\."),
    (True, r"Pipeline seed must be an int, got bool True\."),
])
def test_a_bad_seed_is_refused(seed, message):
    with pytest.raises(ConfigError, match=message):
        _pipeline(seed=seed)


def test_rngs_and_seed_together_are_refused():
    with pytest.raises(ConfigError, match="Pipeline got both rngs= and seed=; give one"):
        _pipeline(seed=0, rngs=nnx.Rngs(0))
