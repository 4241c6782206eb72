"""Per-record keys of stable indices past ``2**32``: every record its own, none repeated.

A flat map numbers output ``k`` of parent ``p`` ``p * max_outputs + k``; with
``max_outputs=2**31`` parent 2's first output is ``2**32``. Its key is
``fold_in(fold_in(row, low), high)`` (``high`` >= 1), where one below ``2**32`` keeps
``fold_in(row, index)``: the values pinned below are those datarax gave before.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from source_reads import check_pipeline_resumes, flat

from datarax.core.errors import DataraxError
from datarax.core.keys import fold_in_rows, index_words, record_keys, step_indices
from datarax.core.lengths import stable_index_bound, wide_stable_indices
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

WIDE = 2**31  # max_outputs: parent p's outputs from p * 2**31


def numbers(n: int = 5) -> MemorySource:
    return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})


def two(record):
    return [{"x": record["x"]}, {"x": record["x"] + 100}]


def two_text(record):  # a text field: the stages run on the host, keys drawn there
    return [{"x": record["x"], "t": "a"}, {"x": record["x"] + 100, "t": "b"}]


def noisy(element, key):
    return element.update_data({"noise": jax.random.uniform(key, (), np.float32),
                                "key": jax.random.key_data(key)})


def keyed(source, *, batch_size: int = 4, own_rngs: bool = False) -> Pipeline:
    config = ElementOperatorConfig(stochastic=True)
    stage = (ElementOperator(config, fn=noisy, rngs=nnx.Rngs(3)) if own_rngs
             else ElementOperator(config, fn=noisy))
    return Pipeline(source, [stage], batch_size=batch_size, rngs=nnx.Rngs(3))


def rows(batch) -> list[tuple[int, tuple[int, int], float]]:
    return [(int(x), tuple(np.asarray(k).tolist()), float(v))
            for x, k, v in zip(np.asarray(batch["x"]), np.asarray(batch["key"]),
                               np.asarray(batch["noise"]))]


def keys_by_x(pipeline) -> dict[int, tuple[int, int]]:
    return {x: key for x, key, _ in flat([rows(b) for b in pipeline])}


# keys datarax gave these records before wide indices (rngs=nnx.Rngs(3), stage 1, epoch 0)
INDEX_0 = (4140961303, 4246713762)  # stable index 0
INDEX_1 = (1823165828, 935431823)  # stable index 1
INDEX_2_31 = (2839477405, 3790139829)  # stable index 2**31
INDEX_2_31_PLUS_1 = (2770243093, 3525914797)


@pytest.mark.parametrize("fn", [two, two_text], ids=["compiled", "text"])
def test_two_records_2_32_apart_get_different_keys_and_augmentation(fn):
    pipeline = keyed(FlatMapSource(numbers(), fn, max_outputs=WIDE))
    got = flat([rows(b) for b in pipeline])
    keys = {x: key for x, key, _ in got}
    noise = {x: v for x, _, v in got}
    assert len(set(keys.values())) == len(keys) == 10  # no two records share a key
    assert len(set(noise.values())) == 10
    # below 2**32: the keys of before
    assert (keys[0], keys[100], keys[1], keys[101]) == (INDEX_0, INDEX_1, INDEX_2_31,
                                                       INDEX_2_31_PLUS_1)
    # 2**32 (parent 2) and 2**32 + 1: fold_in(key of the index's low word, high word 1)
    for x, below in ((2, INDEX_0), (102, INDEX_1)):
        want = jax.random.fold_in(jax.random.wrap_key_data(np.asarray(below, np.uint32)), 1)
        assert keys[x] == tuple(jax.random.key_data(want).tolist())
    assert keys[4] != keys[2] != keys[0]  # 2**33 has high word 2


def test_a_source_that_cannot_reach_2_32_keeps_its_keys():
    narrow = keys_by_x(keyed(FlatMapSource(numbers(), two, max_outputs=3)))
    assert (narrow[0], narrow[100], narrow[1]) == (INDEX_0, INDEX_1,
                                                   (4046047628, 3070580327))
    plain = keys_by_x(keyed(numbers()))
    assert (plain[0], plain[1]) == (INDEX_0, INDEX_1)


def test_a_stage_with_its_own_rngs_keys_wide_indices_apart():
    keys = keys_by_x(keyed(FlatMapSource(numbers(), two, max_outputs=WIDE), own_rngs=True))
    assert len(set(keys.values())) == 10
    assert keys[2] != keys[0] and keys[102] != keys[100]


def test_a_resume_across_2_32_serves_the_same_batches():
    check_pipeline_resumes(lambda: keyed(FlatMapSource(numbers(), two, max_outputs=WIDE),
                                         batch_size=3), rows)


def test_bounds_follow_the_numbering_of_sources_built_from_others():
    flat_map = FlatMapSource(numbers(5), two, max_outputs=3)
    assert stable_index_bound(flat_map) == 15 and not wide_stable_indices(flat_map)
    big = FlatMapSource(numbers(5), two, max_outputs=WIDE)
    assert stable_index_bound(big) == 5 * WIDE and wide_stable_indices(big)
    mixed = InterleaveSource([flat_map, numbers(4)], cycle_length=2)
    assert stable_index_bound(mixed) == 30 and not wide_stable_indices(mixed)
    assert wide_stable_indices(InterleaveSource([numbers(3), big], cycle_length=2))
    assert stable_index_bound(ConcatSource([numbers(3), numbers(4)])) == 7
    assert wide_stable_indices(ConcatSource([numbers(3), big]))
    assert not wide_stable_indices(numbers(5))
    assert stable_index_bound(ShuffleBufferSource(flat_map, buffer_size=4)) == 15
    assert wide_stable_indices(ShuffleBufferSource(big, buffer_size=4))


def test_wide_words_give_the_folds_jax_gives():
    indices = np.asarray([7, 2**32 + 7, 3 * 2**32 + 2**31], np.int64)
    words = index_words(indices)
    assert words.tolist() == [[7, 0], [7, 1], [2**31, 3]]
    rows_ = np.asarray([[0, 7], [3, 9]], np.uint32)
    got = np.asarray(jax.jit(fold_in_rows)(rows_, words))
    base = jax.random.key(5)
    typed = jax.random.key_data(record_keys(base, 2, jnp.asarray(words)))
    epoch_key = jax.random.fold_in(base, 2)
    for r, (low, high) in enumerate(words.tolist()):
        for s in range(2):
            key = jax.random.fold_in(jax.random.wrap_key_data(rows_[s]), low)
            key = jax.random.fold_in(key, high) if high else key
            assert got[s, r].tolist() == jax.random.key_data(key).tolist()
        key = jax.random.fold_in(epoch_key, low)
        key = jax.random.fold_in(key, high) if high else key
        assert np.asarray(typed[r]).tolist() == jax.random.key_data(key).tolist()
    # an index below 2**32 as a word pair keeps the one-word key
    assert got[:, 0].tolist() == np.asarray(fold_in_rows(rows_, indices[:1]))[:, 0].tolist()


def test_a_narrow_source_giving_an_index_past_2_32_is_refused_naming_it():
    assert step_indices(np.asarray([0, 2**32 - 1]), False, None).tolist() == [0, -1]
    with pytest.raises(DataraxError, match=r"MemorySource gave a record stable index "
                       r"4294967296, past 2\*\*32.*stable_index_bound\(\)"):
        step_indices(np.asarray([1, 2**32]), False, numbers())
