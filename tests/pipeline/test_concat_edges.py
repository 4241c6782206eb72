"""ConcatSource in a Pipeline: parts of different kinds and sizes, filtered, shuffled,
resumed mid-epoch — every record of each part served once per epoch, in order."""

from __future__ import annotations

import numpy as np
from flax import nnx

from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, FlatMapSource, MemorySource, MemorySourceConfig


def memory(lo, hi, seed):
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"id": np.arange(lo, hi, dtype=np.int32)})


def ids(batches):
    return [int(i) for b in batches for i in np.asarray(b["id"])]


def test_filter_over_a_concatenation_with_a_stream_part_serves_the_kept_records():
    def both():  # a flat-mapped part has no known length: the concatenation is a stream
        stream = FlatMapSource(memory(100, 112, seed=2), lambda r: [r], max_outputs=1)
        return ConcatSource([memory(0, 7, seed=1), stream])

    order = ids(Pipeline(both(), batch_size=5, rngs=nnx.Rngs(0)))
    odd = [i for i in order if i % 2]
    keep = FilterOperator(predicate=lambda el: el.data["id"] % 2 == 1)
    pipeline = Pipeline(both(), stages=[keep], batch_size=3, rngs=nnx.Rngs(0))
    iterator = iter(pipeline)
    first = ids([next(iterator)])
    state = pipeline.get_state()
    again = Pipeline(both(), stages=[keep], batch_size=3, rngs=nnx.Rngs(0))
    again.set_state(state)
    assert first + ids(again) == odd
    assert first + ids(iterator) == odd
    assert pipeline.stats()["filter"] == {"kept": len(odd), "dropped": len(order) - len(odd)}
