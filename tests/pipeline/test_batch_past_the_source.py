"""A batch_size past the source's records: every pass is one batch of all of them,
computed at their size (batch_size=2**40 over 10 records: before, the pass computed
a full batch_size of rows, or refused the positions it would not read)."""

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

HUGE = 2**40  # a regression fails at once: positions past int32, or 8 TB of rows


def jitter(element, key):
    return element.update_data({"x": element.data["x"] + jax.random.uniform(key)})


def pipeline(batch_size, **settings):
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                          {"x": np.arange(10, dtype=np.float32)})
    stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)
    return Pipeline(source=source, stages=[stage], batch_size=batch_size, rngs=nnx.Rngs(0),
                    **settings)


@pytest.fixture(scope="module")
def expected():
    """Two epochs of the same pipeline with batch_size = its 10 records."""
    p = pipeline(10)
    return [[b["x"].tolist() for b in p] for _ in range(2)]


def test_a_batch_size_far_past_the_records_serves_one_batch_of_them_per_epoch(expected):
    p = pipeline(HUGE)
    assert len(p) == 1
    assert [[b["x"].tolist() for b in p] for _ in range(2)] == expected


def test_step_serves_the_same_batches(expected):
    p = pipeline(HUGE)
    assert [p.step()["x"].tolist() for _ in range(2)] == [e[0] for e in expected]


def test_a_state_saved_after_an_epoch_resumes_with_the_next_one(expected):
    first = pipeline(HUGE)
    assert [b["x"].tolist() for b in first] == expected[0]
    resumed = pipeline(HUGE)
    resumed.set_state(first.get_state())
    assert [b["x"].tolist() for b in resumed] == expected[1]


def test_a_filtered_pass_packs_its_kept_records_into_one_batch():
    from datarax.operators import FilterOperator

    def filtered(batch_size):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                              {"x": np.arange(10, dtype=np.float32)})
        keep_even = FilterOperator(predicate=lambda e: e.data["x"] % 2 == 0)
        stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)
        return Pipeline(source=source, stages=[keep_even, stage], batch_size=batch_size,
                        rngs=nnx.Rngs(0))

    kept = [b["x"].tolist() for b in filtered(10)]
    assert [len(b) for b in kept] == [5]
    assert [b["x"].tolist() for b in filtered(HUGE)] == kept
