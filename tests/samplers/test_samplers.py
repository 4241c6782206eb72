"""Index samplers: orders, epochs, exact resume at every point, refusals."""

import numpy as np
import pytest

from datarax.core.errors import ConfigError, StateError
from datarax.samplers import (
    RangeSampler,
    SequentialSampler,
    ShuffledSampler,
    SlidingWindowSampler,
    index_shuffle_np,
)
from datarax.sources import MemorySource, MemorySourceConfig


def as_list(items):
    return [i.tolist() if isinstance(i, np.ndarray) else i for i in items]


MAKERS = {
    "sequential": lambda: SequentialSampler(7, num_epochs=3),
    "shuffled": lambda: ShuffledSampler(7, seed=4, num_epochs=3),
    "range": lambda: RangeSampler(3, 20, step=4, num_epochs=3),
    "window": lambda: SlidingWindowSampler(9, window=4, stride=2, num_epochs=3),
}


def test_sequential_range_and_window_orders():
    assert list(SequentialSampler(4, num_epochs=2)) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert list(RangeSampler(3, 20, step=4)) == [3, 7, 11, 15, 19]
    assert len(RangeSampler(3, 20, step=4)) == 5
    windows = as_list(SlidingWindowSampler(9, window=4, stride=2))
    assert windows == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7]]  # [6..9] would run past 9
    assert as_list(SlidingWindowSampler(3, window=3)) == [[0, 1, 2]]


def test_shuffled_is_a_new_permutation_each_epoch_matching_memory_source():
    sampler = ShuffledSampler(10, seed=42, num_epochs=3)
    order = list(sampler)
    epochs = [order[0:10], order[10:20], order[20:30]]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    for e, epoch in enumerate(epochs):
        assert epoch == index_shuffle_np(np.arange(10), 9, 42 + e).tolist()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=42), {"x": np.arange(10, dtype=np.int32)})
    assert [int(r["x"]) for r in source] == epochs[0]


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_resume_at_every_point_is_exact(name):
    reference = as_list(MAKERS[name]())
    for point in range(len(reference) + 1):
        sampler = MAKERS[name]()
        head = as_list(next(sampler) for _ in range(point))
        state = sampler.get_state()
        fresh = MAKERS[name]()
        fresh.set_state(dict(state))
        assert head + as_list(fresh) == reference, (name, point, state)


def test_endless_sampler_keeps_going():
    sampler = SequentialSampler(2, num_epochs=-1)
    assert [next(sampler) for _ in range(7)] == [0, 1, 0, 1, 0, 1, 0]
    assert sampler.get_state() == {"epoch": 3, "index": 1}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SequentialSampler(0), "SequentialSampler num_records must be an int >= 1, got 0."),
        (lambda: ShuffledSampler(3, seed=-1), "ShuffledSampler seed must be an int >= 0, got -1."),
        (lambda: ShuffledSampler(3, seed=2**32), "ShuffledSampler seed must be < 2**32"),
        (lambda: RangeSampler(5, 5), "RangeSampler stop must be an int >= 6, got 5."),
        (lambda: RangeSampler(0, 5, step=0), "RangeSampler step must be an int >= 1, got 0."),
        (lambda: SlidingWindowSampler(3, window=4), "window=4 is longer than the 3 records"),
        (lambda: SequentialSampler(3, num_epochs=0), "num_epochs must be an int >= 1, got 0."),
    ],
)
def test_bad_arguments_are_refused(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert message in str(err.value)


def test_bad_state_is_refused():
    sampler = SequentialSampler(4)
    with pytest.raises(StateError, match=r"state 'index' must be an int in \[0, 4\] .*, got -1;"):
        sampler.set_state({"epoch": 0, "index": -1})
    with pytest.raises(StateError,
                       match=r"state is missing 'epoch'; pass the dict "
                             r"SequentialSampler.get_state\(\) returned \(got keys \['index'\]\)"):
        sampler.set_state({"index": 0})
    with pytest.raises(StateError, match=r"'index' must be an int in \[0, 4\] \(items handed out "
                       r"of an epoch of 4 items\), got 5; pass the dict "
                       r"SequentialSampler.get_state\(\) returned"):
        sampler.set_state({"epoch": 0, "index": 5})
    with pytest.raises(StateError, match="expects the dict get_state\\(\\) returned, got list"):
        sampler.set_state([0, 0])


def test_repr_shows_settings_and_position():
    sampler = ShuffledSampler(5, seed=1, num_epochs=2)
    next(sampler), next(sampler)
    assert repr(sampler) == "ShuffledSampler(num_epochs=2, num_records=5, seed=1) at epoch 0, index 2"
    assert repr(SlidingWindowSampler(5, window=3, stride=2)) == (
        "SlidingWindowSampler(num_epochs=1, num_records=5, window=3, stride=2) at epoch 0, index 0")


def test_state_past_the_last_epoch_is_refused_not_served():
    with pytest.raises(StateError, match=r"state 'epoch' must be an int in \[0, 1\] \(the epoch it "
                       r"stands in; this one runs num_epochs=2: build it as the saved one was\), "
                       r"got 5"):
        SequentialSampler(3, num_epochs=2).set_state({"epoch": 5, "index": 0})
    finished = ShuffledSampler(3, seed=2, num_epochs=2)
    finished.set_state({"epoch": 1, "index": 3})  # where a finished run stands
    assert list(finished) == []
    endless = SequentialSampler(3, num_epochs=-1)
    endless.set_state({"epoch": 50, "index": 1})
    assert [next(endless) for _ in range(3)] == [1, 2, 0]
    assert endless.get_state() == {"epoch": 51, "index": 1}
