"""MixSchedule: exact counts, consecutive draws, proportions in every window."""

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.mixing import MixSchedule
from datarax.mixing.schedule import MAX_PERIOD, integer_weights

WEIGHT_SETS = [[0.5, 0.3, 0.2], [1, 1], [0.123, 0.456, 0.421], [7, 1, 1, 3, 0.5]]


@pytest.mark.parametrize("weights", WEIGHT_SETS)
def test_counts_match_the_records_served(weights):
    schedule = MixSchedule(weights, seed=5)
    total = 3 * schedule.period + 17
    owners, _ = schedule.owners_and_draws(0, total)
    checked = sorted(set(range(min(total, 4000))) | set(range(max(total - 300, 0), total + 1)))
    one_hot = np.eye(len(weights), dtype=np.int64)[owners]
    prefix = np.concatenate([np.zeros((1, len(weights)), np.int64), np.cumsum(one_hot, 0)])
    for g in checked:
        assert schedule.counts(g).tolist() == prefix[g].tolist(), g


@pytest.mark.parametrize("weights", WEIGHT_SETS)
def test_each_source_draws_are_consecutive_from_counts(weights):
    schedule = MixSchedule(weights, seed=2)
    start = 5 * schedule.period - 7
    owners, draws = schedule.owners_and_draws(start, 500)
    counts = schedule.counts(start)
    for i in range(len(weights)):
        mine = draws[owners == i]
        assert mine.tolist() == list(range(counts[i], counts[i] + len(mine)))


@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [0.123, 0.456, 0.421], [0.9, 0.07, 0.03]])
def test_proportions_in_every_window_of_10000_within_one_percent(weights):
    schedule = MixSchedule(weights, seed=11)
    owners, _ = schedule.owners_and_draws(0, 60_000)
    target = np.asarray(weights) / np.sum(weights)
    one_hot = np.eye(len(weights), dtype=np.int64)[owners]
    prefix = np.concatenate([np.zeros((1, len(weights)), np.int64), np.cumsum(one_hot, 0)])
    shares = (prefix[10_000:] - prefix[:-10_000]) / 10_000  # every window of 10,000
    worst = np.abs(shares - target).max()
    assert worst <= 0.01 * target.min(), worst  # within 1% of the smallest weight


def test_seed_changes_the_interleaving_and_is_deterministic():
    a = MixSchedule([1, 1, 1], seed=0).owners_and_draws(0, 30)[0].tolist()
    assert a == MixSchedule([1, 1, 1], seed=0).owners_and_draws(0, 30)[0].tolist()
    others = {tuple(MixSchedule([1, 1, 1], seed=s).owners_and_draws(0, 3)[0]) for s in range(12)}
    assert len(others) > 1


def test_simple_ratios_are_exact_and_others_rounded():
    assert integer_weights([0.5, 0.3, 0.2], "abc").tolist() == [5, 3, 2]
    assert integer_weights([2, 4], "ab").tolist() == [1, 2]
    units = integer_weights([0.1234567, 0.8765433], "ab")
    assert units.sum() == MAX_PERIOD and units.tolist() == [8091, 57445]


def test_huge_weights_keep_their_ratios():
    # their sum overflows to inf: every share was 0 and each source got 1 unit alike
    assert integer_weights([1e308, 1e308], "ab").tolist() == [1, 1]
    assert integer_weights([1e308, 3e307], "ab").tolist() == [10, 3]
    with pytest.raises(ConfigError, match="weight of 'c' is 5e-309 of the total"):
        integer_weights([1e308, 1e308, 1.0], "abc")


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1, 0], "MixSource weight of 'b' must be a finite number > 0, got 0; leave the "
                 "source out rather than giving it weight 0."),
        ([1, float("nan")], "MixSource weight of 'b' must be a finite number > 0, got nan; give "
                            "each source a relative weight such as 0.7 or 7."),
        ([-2, 1], "MixSource weight of 'a' must be a finite number > 0, got -2; give each "),
        ([1, "x"], "MixSource weight of 'b' must be a number, got 'x'"),
        ([1, 1e-9], "MixSource weight of 'b' is 1e-09 of the total, below the 1/65536"),
        ([1, 1e-12], "MixSource weight of 'b' is 1e-12 of the total, below the 1/65536"),
        ([1e-10, 1], "MixSource weight of 'a' is 1e-10 of the total, below the 1/65536"),
    ],
)
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ConfigError) as err:
        integer_weights(weights, "ab")
    assert message in str(err.value)


@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [0.123, 0.456, 0.421], [7, 1, 1, 3, 0.5]])
@pytest.mark.parametrize("count", [1, 3, 10, 256, 1000])
def test_max_counts_is_the_most_of_each_source_in_any_window(weights, count):
    schedule = MixSchedule(weights, seed=4)
    span = schedule.period + count  # every window start within a period, and beyond
    owners, _ = schedule.owners_and_draws(0, span)
    one_hot = np.eye(len(weights), dtype=np.int64)[owners]
    prefix = np.concatenate([np.zeros((1, len(weights)), np.int64), np.cumsum(one_hot, 0)])
    most = (prefix[count:] - prefix[:-count]).max(axis=0)
    assert schedule.max_counts(count).tolist() == most.tolist()
