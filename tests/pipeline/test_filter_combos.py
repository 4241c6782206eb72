"""FilterOperator with mixing, shards and device placement (docs/filtering.md's table)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datarax.mixing import MixSource
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def even():
    return FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)


def memory(values):
    return MemorySource(MemorySourceConfig(), {"x": np.asarray(values, np.int32)})


def test_filter_over_a_mixture_keeps_each_kept_record_once():
    mix = MixSource({"a": memory(range(10)), "b": memory(range(100, 106))},
                    weights={"a": 2, "b": 1}, seed=0)
    batches = list(Pipeline(mix, stages=[even()], batch_size=4))
    got = np.concatenate([np.asarray(b["x"]) for b in batches]).tolist()
    assert sorted(got) == [0, 2, 4, 6, 8, 100, 102, 104]
    assert [len(b["x"]) for b in batches] == [4, 4]


def test_filter_per_shard_and_placed_on_a_mesh():
    shards = [Pipeline(memory(range(12)), stages=[even()], batch_size=2, shard_index=i,
                       shard_count=2) for i in range(2)]
    got = [np.concatenate([np.asarray(b["x"]) for b in p]).tolist() for p in shards]
    assert got == [[0, 2, 4], [6, 8, 10]]  # each shard filters its own block
    mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    placed = list(Pipeline(memory(range(8)), stages=[even()], batch_size=2,
                           sharding=sharding))
    assert [np.asarray(b["x"]).tolist() for b in placed] == [[0, 2], [4, 6]]
    assert all(b["x"].sharding == sharding for b in placed)
