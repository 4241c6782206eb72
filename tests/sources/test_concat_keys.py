"""Per-record keys of a concatenation: each record of an epoch its own, over a mixture too.

A mixture's stable indices count draws across passes (they pass its length), so a
concatenation that shifted the next part's indices by the mixture's length gave two
records of one epoch the same key. Parts of plain sources keep their numbers (and keys)
exactly; a concatenation with a part of unbounded indices numbers ``s * num_parts + i``.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from source_reads import check_pipeline_resumes, flat, read_all

from bad_rows import Rows, RowsConfig
from datarax.core.lengths import stable_index_span
from datarax.core.errors import StateError
from datarax.mixing import MixSource
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    FlatMapSource,
    InterleaveSource,
    MemorySource,
    MemorySourceConfig,
    ShuffleBufferSource,
)
from datarax.testing import json_round_trip


def floats(lo: int, hi: int, *, shuffle: bool = False, seed: int = 0) -> MemorySource:
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed),
                        {"x": np.arange(lo, hi, dtype=np.float32)})


def part(kind: str = "host", lo: int = 200, n: int = 3) -> object:
    """``lo .. lo + n - 1``: in memory (indexed) or a host random-access source (read on
    the host without compiling anything)."""
    return floats(lo, lo + n) if kind == "indexed" else Rows(RowsConfig(), n=n, offset=lo)


def mixture(kind: str = "host") -> MixSource:
    """6 records an epoch (``0 .. 3`` and ``100, 101``); stable indices up to 12 in epoch 0."""
    return MixSource({"a": part(kind, 0, 4), "b": part(kind, 100, 2)}, {"a": 2, "b": 1}, seed=0)


def keyed(element, key):
    return element.update_data({"key": jax.random.key_data(key)})


def keyed_pipeline(source, *, stochastic: bool = True) -> Pipeline:
    stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=keyed)
    return Pipeline(source, [stage] if stochastic else [], batch_size=4, rngs=nnx.Rngs(0))


def records_and_keys(batch) -> list[tuple[int, tuple[int, int]]]:
    return [(int(x), tuple(np.asarray(k).tolist())) for x, k in zip(np.asarray(batch["x"]),
                                                                    np.asarray(batch["key"]))]


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_every_record_of_an_epoch_of_a_concatenation_over_a_mixture_gets_its_own_key(kind):
    pipeline = keyed_pipeline(ConcatSource([mixture(kind), part(kind)]))
    assert pipeline.source.kind.value == kind
    epochs = [flat([records_and_keys(b) for b in pipeline]) for _ in range(2)]
    for rows in epochs:
        assert sorted(x for x, _ in rows) == [0, 1, 2, 3, 100, 101, 200, 201, 202]
        assert len({key for _, key in rows}) == 9  # no two records share a key
    assert not {key for _, key in epochs[0]} & {key for _, key in epochs[1]}  # new each epoch


def test_a_concatenation_over_a_mixture_numbers_its_parts_records_apart():
    source = ConcatSource([mixture(), part()])
    mix_alone = mixture()
    assert stable_index_span(source) is None and stable_index_span(mix_alone) is None
    assert source.order_settings()["stable_index_version"] == 2
    compiled = ConcatSource([mixture("indexed"), part("indexed")])
    traced = jax.jit(lambda start: compiled.get_batch_and_indices_at(start, 9)[1])
    for epoch in range(2):
        source.seek(epoch, 0)
        mix_alone.seek(epoch, 0)
        stable = source.get_batch_with_indices(9)[1].tolist()
        own = mix_alone.get_batch_with_indices(6)[1].tolist()
        assert stable == [2 * s for s in own] + [1, 3, 5]  # s * num_parts + part
        assert traced(9 * epoch).tolist() == stable  # the compiled read numbers them the same


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_a_concatenation_of_plain_parts_keeps_its_stable_indices_and_keys(kind):
    def build() -> ConcatSource:
        return ConcatSource([floats(0, 5),
                             ConcatSource([floats(100, 102), part(kind)])])

    source = build()
    assert stable_index_span(source) == len(source) == 10
    assert stable_index_span(source.parts[1]) == 5
    assert "stable_index_version" not in source.order_settings()
    if kind == "host":  # (the compiled read's are pinned in test_concat.py)
        stable = flat(read_all(source, 4, lambda b, s: s.tolist()))
        # a part's own index plus the lengths before it
        assert stable == list(range(10))
    rows = dict(flat([records_and_keys(b) for b in keyed_pipeline(build())]))
    # the keys datarax gave these records before unbounded parts were numbered apart
    assert rows[0] == (865440427, 935054373) and rows[4] == (346454458, 1009055546)
    assert rows[100] == (51689173, 1808827095) and rows[202] == (2884108031, 4135577717)


def test_a_mixture_as_the_last_part_keeps_its_numbering():
    source = ConcatSource([part(), mixture()])  # its indices past the part's: none shared
    assert stable_index_span(source) is None
    assert "stable_index_version" not in source.order_settings()
    own = flat(read_all(mixture(), 4, lambda b, s: s.tolist()))
    assert flat(read_all(source, 4, lambda b, s: s.tolist())) == [0, 1, 2, *(3 + s for s in own)]


@pytest.mark.parametrize("build", [
    lambda: ConcatSource([ConcatSource([mixture(), part()]), part(lo=300, n=2)]),
    lambda: ConcatSource([part(lo=300, n=2), ConcatSource([part(), mixture()])]),
    lambda: InterleaveSource([ConcatSource([mixture(), part()]), part(lo=300, n=2)],
                             cycle_length=2),
    lambda: ShuffleBufferSource(ConcatSource([mixture(), part()]), buffer_size=4),
    lambda: FlatMapSource(ConcatSource([mixture(), part()]),
                          lambda r: [r, {"x": r["x"] + 1000}], max_outputs=2),
    lambda: MixSource([ConcatSource([mixture(), part()]), part(lo=300, n=2)], [1, 1]),
], ids=["nested", "nested-last", "interleave", "shuffle-buffer", "flat-map", "mixture"])
def test_sources_over_a_concatenation_over_a_mixture_give_distinct_stable_indices(build):
    source = build()
    for epoch in range(2):
        source.seek(epoch, 0)
        stable = flat(read_all(source, 4, lambda b, s: s.tolist()))
        assert len(stable) >= 9 and len(set(stable)) == len(stable)


def test_keys_over_a_mixture_resume_exactly_at_every_batch():
    def build():
        return keyed_pipeline(ConcatSource([mixture(), part("host")]))

    check_pipeline_resumes(build, records_and_keys)


def test_a_state_saved_before_version_2_is_refused_where_the_pipeline_draws():
    def old_state(stochastic: bool) -> dict:
        pipeline = keyed_pipeline(ConcatSource([mixture(), part()]), stochastic=stochastic)
        next(iter(pipeline))
        state = json_round_trip(pipeline.get_state())
        del state["settings"]["source.stable_index_version"]  # as datarax before it saved it
        return state

    fresh = keyed_pipeline(ConcatSource([mixture(), part()]))
    with pytest.raises(StateError, match="saved with stable index version 1") as info:
        fresh.set_state(old_state(stochastic=True))
    assert info.value.field == "source.stable_index_version"
    # no stage draws: nothing it serves depends on the numbering, so the state restores
    plain = keyed_pipeline(ConcatSource([mixture(), part()]), stochastic=False)
    plain.set_state(old_state(stochastic=False))
    assert [int(x) for b in plain for x in np.asarray(b["x"])] == [2, 3, 200, 201, 202]


def test_a_source_state_saved_before_version_2_is_refused_naming_the_version():
    source = ConcatSource([mixture(), part()])
    state = json_round_trip(source.get_state())
    del state["settings"]["stable_index_version"]
    with pytest.raises(StateError, match="saved with stable index version 1") as info:
        ConcatSource([mixture(), part()]).set_state(state)
    assert info.value.field == "stable_index_version"
