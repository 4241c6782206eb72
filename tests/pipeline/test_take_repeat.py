"""Pipeline.take / skip / repeat: parts of a pass and many passes, resumed exactly."""

from __future__ import annotations

import copy
import itertools
import json
import pickle

import numpy as np
import pytest

from datarax.core.errors import ConfigError, StateError
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def make(n=7, shuffle=True):
    src = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=4),
                       {"x": np.arange(n, dtype=np.int32)})
    return Pipeline(src, batch_size=2)


def xs(batches):
    return [np.asarray(b["x"]).tolist() for b in batches]


def test_take_and_skip_are_parts_of_one_pass():
    whole = xs(make())
    assert xs(make().take(2)) == whole[:2]
    assert xs(make().skip(2)) == whole[2:]
    assert xs(make().skip(9)) == []
    keep = FilterOperator(predicate=lambda el: el.data["x"] > 1)
    filtered = Pipeline(make().source, stages=[keep], batch_size=2)
    assert xs(filtered.skip(1)) == xs(Pipeline(make().source, stages=[keep], batch_size=2))[1:]
    with pytest.raises(ConfigError, match="int >= 0"):
        make().take(-1)


@pytest.mark.parametrize("how", ["seek", "filtered", "stream concat"])
def test_stats_count_only_the_batches_skip_hands_out(how):
    # An indexed source seeks past the skipped batches; a filtered or stream pipeline reads
    # and drops them. Either way they were not handed out, so stats() leaves them out.
    source = make(n=9).source
    stages = []
    if how == "filtered":
        stages = [FilterOperator(predicate=lambda el: el.data["x"] != 4)]
    elif how == "stream concat":  # read on the host, part by part
        from number_sources import NumberStream

        from datarax.sources import ConcatSource

        source = ConcatSource([source, NumberStream(9, 12)])
    pipeline = Pipeline(source, stages=stages, batch_size=2)
    handed = xs(pipeline.skip(2))
    stats = pipeline.stats()
    assert handed and (stats["batches"], stats["records"]) == (len(handed), sum(map(len, handed)))
    if how == "filtered":
        assert stats["filter"]["kept"] == sum(map(len, handed))


def test_repeat_advances_the_epochs_and_resumes_exactly():
    p = make()
    epochs = [xs(p) for _ in range(3)]
    assert epochs[0] != epochs[1]  # a new shuffle each epoch
    flat = sum(epochs, [])
    assert xs(make().repeat(3)) == flat
    for at in (1, 4, 8):  # 8: the end of the second epoch
        first = make()
        it = first.repeat(3)
        for _ in range(at):
            next(it)
        state = it.get_state()
        resumed = make().repeat(3)
        resumed.set_state(state)
        assert xs(resumed) == flat[at:]
    take = make().take(3)
    next(take)
    state = take.get_state()
    again = make().take(3)
    again.set_state(state)
    assert xs(again) == flat[1:3]


def test_repeat_forever_stops_on_empty_passes():
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    none = Pipeline(src, stages=[FilterOperator(predicate=lambda el: el.data["x"] < 0)],
                    batch_size=2)
    with pytest.raises(StopIteration, match="two empty passes"):
        next(none.repeat())


def random_subset():
    """6 records, each kept with probability 0.2 by a fresh draw every epoch: epochs
    1, 3 and 7 keep none of them (0, 2, 4, 5, 6 keep one batch each)."""
    import jax
    from flax import nnx

    from datarax.operators import ElementOperator

    draw = ElementOperator(fn=_draw_u, stochastic=True)
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                       {"x": np.arange(6, dtype=np.int32)})
    keep = FilterOperator(predicate=_u_below_0_2)
    return Pipeline(src, stages=[draw, keep], batch_size=4, rngs=nnx.Rngs(3))


# module-level: every random_subset() pipeline has the same stages, one compiled step
def _draw_u(el, key):
    import jax

    return {**el.data, "u": jax.random.uniform(key)}


def _u_below_0_2(el):
    return el.data["u"] < 0.2


def test_one_empty_epoch_neither_ends_repeat_nor_step_nor_a_resumed_repeat():
    p = random_subset()
    per_epoch = [len(xs(p)) for _ in range(8)]
    assert per_epoch == [1, 0, 1, 0, 1, 1, 1, 0]
    whole = xs(itertools.islice(random_subset().repeat(), 6))
    assert len(whole) == 6
    stepper = random_subset()
    assert [np.asarray(stepper.step()["x"]).tolist() for _ in range(6)] == whole
    for at in range(1, 6):  # each state taken after the last batch of its epoch
        it = random_subset().repeat()
        for _ in range(at):
            next(it)
        resumed = random_subset().repeat()
        resumed.set_state(it.get_state())
        assert xs(itertools.islice(resumed, 6 - at)) == whole[at:]


def test_a_take_longer_than_its_pass_resumes_to_its_end_not_into_the_next_epoch():
    whole = xs(make())  # 4 batches
    p = make()
    take = p.take(6)
    assert xs(take) == whole  # the pass ended before 6 batches
    state = take.get_state()
    resumed = make().take(6)
    resumed.set_state(state)
    assert xs(resumed) == []
    assert xs(take) == []


def test_counts_may_be_numpy_ints_and_a_tampered_count_is_refused():
    whole = xs(make())
    steps = np.int64(2)  # e.g. computed with numpy from len(pipeline)
    assert xs(make().take(steps)) == whole[:2]
    assert xs(make().skip(steps)) == whole[2:]
    assert xs(make().repeat(np.int64(1))) == whole
    take = make().take(2)
    with pytest.raises(StateError, match="take_left"):
        take.set_state({"parent": make().get_state(), "take": 2, "take_left": -3})
    repeat = make().repeat(2)
    with pytest.raises(StateError, match="epochs_left"):
        repeat.set_state({"parent": make().get_state(), "epochs_left": "2"})


def resumed_take(state, batches):
    """A new pipeline and its take(batches), restored from ``state`` (saved as JSON)."""
    pipeline = make()
    take = pipeline.take(batches)
    take.set_state(json.loads(json.dumps(state)))
    return pipeline, take


@pytest.mark.parametrize("batches", [1, 2, 4])  # 4: the epoch's last batch (7 records)
def test_a_take_restored_after_its_last_batch_leaves_the_rest_of_its_pass_unserved(batches):
    p = make()
    take = p.take(batches)
    served = xs(take)
    state = take.get_state()
    assert state["take_left"] == 0
    after = [xs(p), xs(p)]  # as after a break: the next loop starts the next epoch
    assert after[0] == xs(make().repeat(2))[4:]
    resumed, again = resumed_take(state, batches)
    assert xs(again) == []
    assert [xs(resumed), xs(resumed)] == after
    assert served == xs(make())[:batches]


def test_a_take_restored_inside_its_batches_goes_on_then_the_next_epoch():
    p = make()
    take = p.take(3)
    next(take)
    state = take.get_state()
    rest, after = xs(take), xs(p)
    resumed, again = resumed_take(state, 3)
    assert xs(again) == rest
    assert xs(resumed) == after


def test_a_take_of_nothing_leaves_the_pipeline_where_it_stands():
    p = make()
    with iter(p) as it:
        next(it)
    mid = p.get_state()  # restored: the next loop serves the rest of epoch 0
    p = make()
    p.set_state(mid)
    take = p.take(0)
    assert xs(take) == []
    state, after = take.get_state(), xs(p)
    assert after == xs(make())[1:]
    resumed, again = resumed_take(state, 0)
    assert xs(again) == []
    assert xs(resumed) == after


def test_a_take_state_into_a_take_of_another_count_is_refused_naming_take():
    take = make().take(2)
    next(take)
    state = json.loads(json.dumps(take.get_state()))
    with pytest.raises(StateError) as err:
        make().take(5).set_state(state)
    assert err.value.field == "take"
    assert str(err.value) == (
        "Take.set_state: the state was saved by pipeline.take(2) (1 batch left), but this "
        "is pipeline.take(5); the batches left count from the saved take. Restore it into "
        "pipeline.take(2).")
    with pytest.raises(StateError, match="'take_left' is 4, more than the 2 batch"):
        make().take(2).set_state(dict(state, take_left=4))
    with pytest.raises(StateError, match="with keys 'take_left', 'take' and 'parent'"):
        make().take(2).set_state({k: v for k, v in state.items() if k != "take"})


def test_a_finished_take_restored_on_another_process_count_starts_the_next_epoch():
    def build(index, count):
        src = MemorySource(MemorySourceConfig(shuffle=True, seed=2),
                           {"x": np.arange(12, dtype=np.int32)})
        return Pipeline(source=src, batch_size=2, shard_index=index, shard_count=count)

    take = build(0, 2).take(1)
    assert len(xs(take)) == 1
    state = json.loads(json.dumps(take.get_state()))
    one = build(0, 1)
    again = one.take(1)
    again.set_state(state)  # nothing of epoch 0 is left to this take
    assert xs(again) == []
    assert xs(one) == xs(build(0, 1).repeat(2))[6:]  # the whole of epoch 1


def test_len_of_take_and_repeat_counts_the_batches_they_still_serve():
    p = make()  # 7 records, batches of 2: 4 batches an epoch
    take = p.take(3)
    assert len(take) == 3
    next(take)
    assert len(take) == 2 and len(xs(take)) == 2 and len(take) == 0
    assert len(make().take(9)) == 4  # the pass holds fewer than asked
    resumed = make()
    resumed.set_state(json.loads(json.dumps(p.get_state())))  # 3 batches in: 1 left
    assert len(resumed.take(9)) == 1 == len(xs(resumed.take(9)))
    rep = make().repeat(3)
    assert len(rep) == 12
    next(rep)
    assert len(rep) == 11 == len(xs(rep))
    again = make()
    again.set_state(json.loads(json.dumps(p.get_state())))
    assert len(again.repeat(2)) == 1 + 4 == len(xs(again.repeat(2)))


def test_len_of_take_and_repeat_says_why_when_unknown():
    keep = FilterOperator(predicate=lambda el: el.data["x"] > 1)
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    filtered = Pipeline(src, stages=[keep], batch_size=2)
    with pytest.raises(TypeError, match=r"len\(pipeline.take\(2\)\) is unknown.*FilterOperator"):
        len(filtered.take(2))
    with pytest.raises(TypeError, match=r"len\(repeat\(2\)\) is unknown.*FilterOperator"):
        len(filtered.repeat(2))
    with pytest.raises(TypeError, match="without end"):
        len(make().repeat())


@pytest.mark.parametrize("saved, into, left, restore", [
    (None, 2, None, "pipeline.repeat(None)"),  # restored, it ran without end
    (3, 2, 3, "pipeline.repeat(3) or more"),
    (2, None, 2, "pipeline.repeat(2) or more"),  # restored, it stopped after 2 passes
])
def test_a_repeat_state_of_another_setting_that_does_not_fit_is_refused(saved, into, left,
                                                                        restore):
    repeat = make().repeat(saved)
    next(repeat)
    state = json.loads(json.dumps(repeat.get_state()))
    with pytest.raises(StateError) as err:
        make().repeat(into).set_state(state)
    assert err.value.field == "epochs_left"
    assert str(err.value).startswith(
        f"Repeat.set_state: 'epochs_left' is {left}, which does not fit this "
        f"pipeline.repeat({into})")
    assert str(err.value).endswith(f"Restore it into the repeat that saved it ({restore}).")


@pytest.mark.parametrize("epochs", [None, 2])
def test_a_repeat_state_restores_exactly_into_the_same_setting(epochs):
    whole = xs(itertools.islice(make().repeat(epochs), 8))  # two passes of 4 batches
    repeat = make().repeat(epochs)
    seen = xs(itertools.islice(repeat, 5))
    resumed = make().repeat(epochs)
    resumed.set_state(json.loads(json.dumps(repeat.get_state())))
    assert seen + xs(itertools.islice(resumed, 3)) == whole
    assert epochs is None or xs(resumed) == []


def test_a_copied_repeat_keeps_its_setting_not_the_passes_left():
    repeat = make().repeat(3)
    xs(itertools.islice(repeat, 5))  # into the second pass: 2 passes left
    fresh = make().repeat(3)
    next(fresh)
    state = json.loads(json.dumps(fresh.get_state()))  # 3 passes left
    for copied in (copy.deepcopy(repeat), pickle.loads(pickle.dumps(repeat))):
        assert copied.get_state()["epochs_left"] == 2
        copied.set_state(state)  # fits its setting, repeat(3)
        assert len(copied) == 11
