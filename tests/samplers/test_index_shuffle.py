"""The Feistel shuffle equals Grain's index_shuffle bit for bit, on host and under jit."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from grain.experimental import index_shuffle as grain_index_shuffle

from datarax.samplers import index_shuffle, index_shuffle_jnp, index_shuffle_np
from datarax.samplers.index_shuffle import block_bits, round_keys


def grain_perm(n: int, seed: int, indices=None) -> np.ndarray:
    indices = range(n) if indices is None else indices
    return np.array([grain_index_shuffle(index=int(i), max_index=n - 1, seed=seed, rounds=4) for i in indices])


@pytest.mark.parametrize("n", [1, 2, 3, 10, 97, 1000, 4096])
@pytest.mark.parametrize("seed", [0, 42, 43, 2**32 - 1])
def test_all_three_versions_equal_grain(n, seed):
    expected = grain_perm(n, seed)
    if seed in (0, 2**32 - 1):  # the pure-Python version (~65k encryptions per n and seed)
        assert [index_shuffle(i, n - 1, seed) for i in range(n)] == expected.tolist()
    np.testing.assert_array_equal(index_shuffle_np(np.arange(n), n - 1, seed), expected)
    jitted = jax.jit(lambda i, s: index_shuffle_jnp(i, n - 1, s))
    np.testing.assert_array_equal(np.asarray(jitted(jnp.arange(n), jnp.uint32(seed))), expected)


@pytest.mark.parametrize("n", [65_535, 65_536, 100_000, 1_000_003])
def test_large_sizes_equal_grain_on_a_sample(n):
    sample = np.linspace(0, n - 1, 301).astype(np.int64)
    expected = grain_perm(n, 7, sample)
    np.testing.assert_array_equal(index_shuffle_np(sample, n - 1, 7), expected)
    np.testing.assert_array_equal(np.asarray(index_shuffle_jnp(jnp.asarray(sample), n - 1, 7)), expected)


@pytest.mark.parametrize("n", [1, 5, 1000, 65_536, 70_001])
def test_is_a_permutation(n):
    perm = index_shuffle_np(np.arange(n), n - 1, 3)
    assert sorted(perm.tolist()) == list(range(n))


def test_power_of_two_plus_one_stays_a_permutation_where_grain_is_not():
    n = 2**16 + 1
    ours = index_shuffle_np(np.arange(n), n - 1, 11)
    assert len(np.unique(ours)) == n
    assert block_bits(n - 1) == 18
    sample = grain_perm(n, 11, range(0, n, 997))
    assert not np.array_equal(ours[::997], sample)  # documented deviation


def test_seed_plus_epoch_vectorised_seeds():
    n = 50
    seeds = np.array([42] * n + [43] * n, dtype=np.uint64)
    both = index_shuffle_np(np.tile(np.arange(n), 2), n - 1, seeds)
    np.testing.assert_array_equal(both[:n], grain_perm(n, 42))
    np.testing.assert_array_equal(both[n:], grain_perm(n, 43))
    traced = index_shuffle_jnp(jnp.tile(jnp.arange(n), 2), n - 1, jnp.asarray(seeds, jnp.uint32))
    np.testing.assert_array_equal(np.asarray(traced), both)


def test_round_keys_match_std_seed_seq():
    # std::seed_seq{42}.generate(4 words); these keys reproduce Grain's permutations above.
    assert round_keys(42) == [735521182, 3707395978, 3290902861, 980519533]


def test_index_out_of_range():
    with pytest.raises(ValueError, match=r"index must be in \[0, 9\]"):
        index_shuffle(10, 9, 0)


@pytest.mark.parametrize(("indices", "max_index", "message"), [
    (np.array([-1]), 9, "indices must be in [0, 9] (positions of the permutation of "
                        "[0, max_index]), got -1..-1."),
    (np.array([3, 10]), 9, "indices must be in [0, 9]"),
    (np.array([70001]), 70000, "got 70001..70001."),  # cycle walking, no table
    (np.array([5]), 0, "indices must be in [0, 0]"),
    (np.array([0]), -1, "max_index must be >= 0 (the permutation is of [0, max_index]), got -1."),
    (np.array([1.5]), 9, "indices must be integers, got dtype float64"),
])
def test_np_refuses_positions_outside_the_permutation(indices, max_index, message):
    # each of these once named a record of the permutation (a repeat) or raised numpy's error
    with pytest.raises(ValueError, match=re.escape(message)):
        index_shuffle_np(indices, max_index, 0)
    assert index_shuffle_np(np.array([], np.int64), 9, 0).tolist() == []


def test_seeds_are_taken_mod_2_32_and_bad_ones_refused():
    order = index_shuffle_np(np.arange(10), 9, 3).tolist()
    assert order == [index_shuffle(i, 9, 3) for i in range(10)] == [4, 7, 0, 8, 2, 5, 3, 6, 1, 9]
    assert index_shuffle_np(np.arange(10), 9, 2**64 + 3).tolist() == order
    assert index_shuffle(2, 9, 2**32 + 3) == order[2]
    with pytest.raises(ValueError, match=re.escape("index_shuffle seed must be >= 0 (taken mod "
                                                   "2**32), got -1.")):
        index_shuffle(2, 9, -1)  # was numpy's OverflowError
    with pytest.raises(ValueError, match="index_shuffle seed must be an int .*got float 1.5"):
        index_shuffle(2, 9, 1.5)  # was cast to seed 1
    with pytest.raises(ValueError, match="index_shuffle_np seed must be >= 0 .*got -3"):
        index_shuffle_np(np.arange(3), 9, np.array([1, 2, -3]))
