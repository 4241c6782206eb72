"""A batch_size past a host source's records (a file source, a filtered one): the
short batch its per-record stages run on is padded to the epoch's records, not to
batch_size (batch_size=2**40 over 10 records: before, that many rows were padded)."""

import jax
import numpy as np
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import NpySource, NpySourceConfig

HUGE = 2**40  # a regression fails at once: positions past int32, or 8 TB of rows


def jitter(element, key):
    return element.update_data({"data": element.data["data"] + jax.random.randint(key, (), 0, 9)})


def pipeline(path, batch_size, keep_even=False):
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)]
    if keep_even:
        stages.insert(0, FilterOperator(predicate=lambda e: e.data["data"] % 2 == 0))
    source = NpySource(NpySourceConfig(paths=str(path), shuffle=True, seed=1))
    return Pipeline(source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(0))


def epochs(p, n=2):
    return [[b["data"].tolist() for b in p] for _ in range(n)]


def test_a_file_source_serves_one_batch_of_its_records(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(10, dtype=np.int8))
    expected = epochs(pipeline(path, 10))
    assert [len(e) for e in expected] == [1, 1] and len(expected[0][0]) == 10
    assert epochs(pipeline(path, HUGE)) == expected


def test_a_filtered_file_source_serves_one_batch_of_its_kept_records(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(10, dtype=np.int8))
    kept = epochs(pipeline(path, 10, keep_even=True), 1)
    assert [len(e[0]) for e in kept] == [5]
    assert epochs(pipeline(path, HUGE, keep_even=True), 1) == kept


def test_a_stream_shorter_than_a_batch_pads_no_row_past_its_records():
    from number_sources import NumberStream

    def stream_pipeline(batch_size):
        stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=lambda e, k: (
            e.update_data({"x": e.data["x"] + jax.random.randint(k, (), 0, 9)})))
        return Pipeline(source=NumberStream(0, 10), stages=[stage], batch_size=batch_size,
                        rngs=nnx.Rngs(0))

    expected = [[b["x"].tolist() for b in p] for p in [stream_pipeline(4)] * 2]
    assert [len(e) for e in expected] == [3, 3]
    flat = [[sum(e, [])] for e in expected]  # the same records and draws, one batch a pass
    assert [[b["x"].tolist() for b in p] for p in [stream_pipeline(HUGE)] * 2] == flat
