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


def test_filter_over_packed_text_keeps_the_packed_rows_it_names_and_resumes():
    from datarax.text import PackedTextConfig, PackedTextSource

    texts = [" ".join(str(100 * i + j) for j in range(1 + (7 * i) % 11)) for i in range(40)]

    def packed():
        return PackedTextSource(PackedTextConfig(seq_len=8, open_rows=2), lambda epoch: texts,
                                lambda text: [int(w) for w in text.split()])

    def rows(batches):
        return [r for b in batches for r in np.asarray(b["tokens"]).tolist()]

    several_documents = FilterOperator(predicate=lambda el: el.data["segment_ids"].max() > 1)
    every = [b for b in Pipeline(packed(), batch_size=3)]
    kept = [r for b in every for r, s in zip(np.asarray(b["tokens"]).tolist(),
                                             np.asarray(b["segment_ids"]).max(axis=1)) if s > 1]
    every = rows(every)
    assert 0 < len(kept) < len(every)
    pipeline = Pipeline(packed(), stages=[several_documents], batch_size=3)
    it = iter(pipeline)
    head = [next(it), next(it)]
    state = it.get_state()
    tail = list(it)
    assert rows(head + tail) == kept
    assert all(len(b["tokens"]) == 3 for b in (head + tail)[:-1])
    again = iter(Pipeline(packed(), stages=[several_documents], batch_size=3))
    again.set_state(state)
    assert rows(list(again)) == rows(tail)
