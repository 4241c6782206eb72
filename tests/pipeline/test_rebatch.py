"""Rebatch: grouped and split batches hold the pipeline's records in order, once each;
lengths, exact resume at every boundary, and refusals."""

import copy
import json
import pickle

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, StateError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline, Rebatch
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import check_resume_exact


def jitter(element, key):
    return {**element.data, "noise": jax.random.uniform(key, ())}


def pipeline(n=11, batch_size=4, shuffle=True, drop_remainder=False, stochastic=True,
             nested=True):
    ids = np.arange(n, dtype=np.int32)
    data = {"id": ids, "name": [f"r{i}" for i in ids]}
    if nested:  # (check_resume_exact compares flat batches only)
        data["meta"] = {"double": ids * 2}
    src = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=7), data)
    noise = ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)
    stages = [noise] if stochastic else []
    return Pipeline(source=src, stages=stages, batch_size=batch_size,
                    drop_remainder=drop_remainder, rngs=nnx.Rngs(1))


def ids(batches):
    return [np.asarray(b["id"]).tolist() for b in batches]


def flat(batches, field):
    out = []
    for b in batches:
        value = b[field]
        out.extend(value if isinstance(value, list) else np.asarray(value).tolist())
    return out


@pytest.mark.parametrize("drop", [False, True])
def test_group_joins_k_consecutive_batches_with_a_short_last_group(drop):
    plain = ids(pipeline(drop_remainder=drop, stochastic=False))  # 11 records, batch 4
    grouped = Rebatch(pipeline(drop_remainder=drop, stochastic=False), group=2)
    got = list(grouped)
    if drop:  # batches of 4, 4 (3 dropped): one group of 8
        assert [len(b) for b in ids(got)] == [8]
    else:  # 4, 4, 3 -> 8 and 3
        assert [len(b) for b in ids(got)] == [8, 3]
    assert ids(got)[0] == plain[0] + plain[1]
    assert flat(got, "id") == [i for b in plain for i in b]
    assert flat(got, "name") == [f"r{i}" for b in plain for i in b]
    assert np.asarray(got[0]["meta"]["double"]).tolist() == [2 * i for i in ids(got)[0]]
    assert len(grouped) == len(got)


def test_group_values_equal_the_pipeline_including_per_record_draws():
    plain = list(pipeline())
    got = list(Rebatch(pipeline(), group=3))
    assert [len(b) for b in ids(got)] == [11]
    assert flat(got, "noise") == flat(plain, "noise")
    assert flat(got, "id") == flat(plain, "id")


def test_split_cuts_each_batch_into_k_equal_parts_and_the_short_batch_into_that_size():
    plain = ids(pipeline(stochastic=False))  # batches of 4, 4, 3
    halves = Rebatch(pipeline(stochastic=False), split=2)
    got = list(halves)
    assert ids(got) == [plain[0][:2], plain[0][2:], plain[1][:2], plain[1][2:],
                        plain[2][:2], plain[2][2:]]
    assert [len(b) for b in ids(got)] == [2, 2, 2, 2, 2, 1]
    assert flat(got, "name") == [f"r{i}" for b in plain for i in b]
    assert len(halves) == 6
    quarters = Rebatch(pipeline(stochastic=False), split=4)
    assert len(quarters) == 11 and [len(b) for b in ids(quarters)] == [1] * 11


def test_split_values_equal_the_pipeline_including_per_record_draws():
    plain = list(pipeline())
    got = list(Rebatch(pipeline(), split=2))
    assert flat(got, "noise") == flat(plain, "noise")
    assert flat(got, "id") == flat(plain, "id")


def test_each_loop_is_one_epoch_and_epochs_differ_in_order():
    grouped = Rebatch(pipeline(stochastic=False), group=2)
    first, second = flat(list(grouped), "id"), flat(list(grouped), "id")
    assert sorted(first) == sorted(second) == list(range(11))
    assert first != second  # shuffled anew each epoch
    assert grouped.epoch == 2  # two passes ended: the position is epoch 2's start


@pytest.mark.parametrize("mode", [{"group": 2}, {"group": 3}, {"split": 2}])
def test_a_state_after_the_last_batch_restores_to_an_empty_pass(mode):
    # docs/reliability.md, "Epoch ends": inside the loop after its last batch the pass
    # is open (epoch 0, nothing left); after the loop it is epoch 1's start.
    reference = Rebatch(pipeline(stochastic=False), **mode)
    list(reference)
    second = ids(reference)
    rebatch = Rebatch(pipeline(stochastic=False), **mode)
    for _ in rebatch:
        inside = json.loads(json.dumps(rebatch.get_state()))
    after = json.loads(json.dumps(rebatch.get_state()))
    assert (inside["parent"]["epoch"], after["parent"]["epoch"]) == (0, 1)
    fresh = Rebatch(pipeline(stochastic=False), **mode)
    fresh.set_state(inside)
    assert list(fresh) == [] and ids(fresh) == second
    fresh = Rebatch(pipeline(stochastic=False), **mode)
    fresh.set_state(after)
    assert ids(fresh) == second


def test_iterator_len_counts_what_is_left():
    it = iter(Rebatch(pipeline(stochastic=False), split=2))
    left = [len(it)]
    for _ in it:
        left.append(len(it))
    assert left == [6, 5, 4, 3, 2, 1, 0]
    it = iter(Rebatch(pipeline(stochastic=False), group=2))
    left = [len(it)]
    for _ in it:
        left.append(len(it))
    assert left == [2, 1, 0]


def test_split_state_is_the_batch_before_plus_the_part():
    halves = Rebatch(pipeline(), split=2)
    it = iter(halves)
    next(it)
    state = halves.get_state()
    assert state["part"] == 1 and state["parent"]["position"] == 0
    assert state["rebatch"] == {"mode": "split", "k": 2}
    next(it)
    state = halves.get_state()
    assert state["part"] == 0 and state["parent"]["position"] == 4


@pytest.mark.parametrize("mode", [{"group": 2}, {"group": 3}, {"split": 2}, {"split": 4}])
def test_resume_is_exact_at_every_boundary_over_three_epochs(mode):
    def make():
        return Rebatch(pipeline(nested=False), **mode)

    per_epoch = len(make())
    report = check_resume_exact(make, list(range(3 * per_epoch + 1)), num_epochs=3)
    assert report.batches_per_epoch == (per_epoch,) * 3
    assert report.num_records == 33


def test_resume_by_hand_mid_split_batch_skips_the_parts_handed_out():
    reference = [np.asarray(b["noise"]).tolist() for b in Rebatch(pipeline(), split=4)]
    first = Rebatch(pipeline(), split=4)
    it = iter(first)
    seen = [np.asarray(next(it)["noise"]).tolist() for _ in range(6)]  # batch 1, part 2
    state = json.loads(json.dumps(first.get_state()))
    assert state["part"] == 2
    again = Rebatch(pipeline(), split=4)
    again.set_state(state)
    rest = [np.asarray(b["noise"]).tolist() for b in again]
    assert seen + rest == reference


def test_refusals():
    with pytest.raises(ConfigError, match=r"split=3 needs a batch_size divisible by 3; "
                       r"the pipeline's batch_size is 4"):
        Rebatch(pipeline(), split=3)
    with pytest.raises(ConfigError, match="exactly one of group=k or split=k"):
        Rebatch(pipeline(), group=2, split=2)
    with pytest.raises(ConfigError, match="exactly one of group=k or split=k"):
        Rebatch(pipeline())
    with pytest.raises(ConfigError, match=r"group= must be an int >= 1, got 0"):
        Rebatch(pipeline(), group=0)
    source = MemorySource(MemorySourceConfig(), {"id": np.arange(4, dtype=np.int32)})
    for not_a_pipeline, name in ((source, "MemorySource"), (None, "NoneType")):
        with pytest.raises(ConfigError, match=f"Rebatch regroups the batches of a Pipeline, "
                           f"got {name}; pass Rebatch\\(Pipeline\\(source="):
            Rebatch(not_a_pipeline, group=2)
    state = Rebatch(pipeline(), group=2).get_state()
    with pytest.raises(StateError,
                       match=r"saved by Rebatch\(group=2\); this is Rebatch\(split=2\)"):
        Rebatch(pipeline(), split=2).set_state(state)
    with pytest.raises(StateError, match="keys 'rebatch', 'part' and 'parent'"):
        Rebatch(pipeline(), group=2).set_state(state["parent"])
    with pytest.raises(StateError, match=r"part=5 is out of range for Rebatch\(split=2\)"):
        Rebatch(pipeline(), split=2).set_state({**state, "rebatch": {"mode": "split", "k": 2},
                                                "part": 5})


def test_a_state_taken_after_a_break_mid_batch_keeps_the_parts_left():
    reference = flat(list(Rebatch(pipeline(), split=4)), "noise")
    first = Rebatch(pipeline(), split=4)
    seen = []
    for batch in first:
        seen.extend(np.asarray(batch["noise"]).tolist())
        if len(seen) == 3:
            break
    state = json.loads(json.dumps(first.get_state()))
    assert (state["part"], state["parent"]["position"]) == (3, 0)
    again = Rebatch(pipeline(), split=4)
    again.set_state(state)
    assert seen + flat(list(again), "noise") == reference
    assert again.get_state()["part"] == 0  # the pass ended on a batch boundary


def test_repr_names_the_mode_source_and_batch_size():
    assert repr(Rebatch(pipeline(), split=2)) == (
        "Rebatch(split=2) of a Pipeline over MemorySource with batch_size 4")


@pytest.mark.parametrize("how", [{"split": 2}, {"group": 2}])
@pytest.mark.parametrize("copy_of", [copy.deepcopy, lambda r: pickle.loads(pickle.dumps(r))])
def test_a_copied_or_pickled_rebatch_continues_where_the_original_stands(how, copy_of):
    reference = list(Rebatch(pipeline(), **how))
    original = Rebatch(pipeline(), **how)
    it = iter(original)
    seen = [next(it)]  # inside a split batch: one of its parts handed out
    copied = list(copy_of(original))
    rest = list(it)  # the original is not moved by its copy
    for field in ("id", "noise"):
        assert flat(seen + copied, field) == flat(reference, field)
        assert flat(seen + rest, field) == flat(reference, field)


def test_a_rebatch_iterator_is_refused_by_copy_and_pickle_naming_what_to_copy():
    it = iter(Rebatch(pipeline(), split=2))
    for copy_of in (copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="Copy or pickle the Rebatch instead"):
            copy_of(it)
    assert repr(it).startswith("<RebatchIterator of Rebatch(split=2) of a Pipeline over "
                               "MemorySource with batch_size 4: <PipelineIterator over")


def test_repr_of_a_rebatch_whose_init_raised_says_so_instead_of_raising():
    # a verbose traceback (IPython %xmode Verbose, pytest --showlocals) shows ``self``
    with pytest.raises(ConfigError) as raised:
        Rebatch(pipeline(), split=3)
    half_built = next(tb.tb_frame.f_locals["self"] for tb in _frames(raised.tb)
                      if isinstance(tb.tb_frame.f_locals.get("self"), Rebatch))
    assert repr(half_built) == "Rebatch(not built)"


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_split_of_a_padded_pipeline_cuts_the_padded_batch_and_len_counts_every_part():
    source = MemorySource(MemorySourceConfig(), {"id": np.arange(10, dtype=np.int32)})
    rebatch = Rebatch(Pipeline(source=source, stages=[], batch_size=4, pad_remainder=True),
                      split=4)
    it = iter(rebatch)
    assert len(rebatch) == len(it) == 12
    parts = [(b["id"].tolist(), b["valid"].tolist()) for b in it]
    assert len(parts) == 12  # every process takes as many steps: padding parts stay
    assert [p for p, v in parts if v[0]] == [[i] for i in range(10)]
    assert [v for _, v in parts[-2:]] == [[False], [False]]
    it = iter(rebatch)
    for _ in range(9):
        next(it)
    assert len(it) == 3


def test_the_old_dag_import_names_the_new_one():
    with pytest.raises(ImportError) as err:
        from datarax.dag import Rebatch as _  # noqa: F401
    assert str(err.value) == (
        "Rebatch moved from datarax.dag to datarax.pipeline: write "
        "'from datarax.pipeline import Rebatch'.")
    import datarax.dag

    assert not hasattr(datarax.dag, "Nothing")


@pytest.mark.parametrize("mode, served", [({"split": 4}, 3), ({"group": 2}, 1)])
def test_an_iterator_restored_mid_pass_continues_inside_itself(mode, served):
    reference = flat(list(Rebatch(pipeline(), **mode)), "noise")
    it = iter(Rebatch(pipeline(), **mode))
    seen = flat([next(it) for _ in range(served)], "noise")  # mid batch 0 / after group 0
    state = json.loads(json.dumps(it.get_state()))
    stale = iter(Rebatch(pipeline(), **mode))
    next(stale)  # an iterator already partly served is taken over by the restore
    stale.set_state(state)
    assert len(stale) == len(Rebatch(pipeline(), **mode)) - served
    assert seen + flat(stale, "noise") == reference


@pytest.mark.parametrize("mode", ["group", "split"])
@pytest.mark.parametrize("unused", ["dropped", "state taken"])
def test_a_restored_rebatch_iterator_that_served_nothing_passes_nothing_over(mode, unused):
    def make():
        return Rebatch(pipeline(n=20, stochastic=False), **{mode: 2})

    saved = iter(make())
    next(saved), next(saved), next(saved)  # split: inside a batch (part 1 of 2 out)
    state, rest = saved.get_state(), ids(saved)
    restored = make()
    restored.set_state(state)
    first = iter(restored)  # made, then left before any batch
    if unused == "state taken":
        restored = make()
        restored.set_state(first.get_state())
    assert ids(restored) == rest


def test_a_bad_repeat_count_of_a_rebatch_names_rebatch_repeat():
    rebatch = Rebatch(pipeline(stochastic=False), split=2)
    with pytest.raises(ConfigError) as err:
        rebatch.repeat(-1)
    assert str(err.value) == (
        "Rebatch.repeat must be an int >= 0 (or None: without end), got -1.")
    assert len(rebatch.repeat(np.int64(2))) == 2 * len(rebatch)


@pytest.mark.parametrize("mode", ["group", "split"])
def test_an_iterator_a_newer_one_ended_raises_stale_rather_than_stop(mode):
    from datarax.core.errors import StaleIteratorError

    rebatch = Rebatch(pipeline(stochastic=False), **{mode: 2})
    old = iter(rebatch)
    next(old)
    newest = iter(rebatch)
    with pytest.raises(StaleIteratorError, match=rf"^This iterator of Rebatch\({mode}=2\) of a "
                       r"Pipeline over MemorySource with batch_size 4 was ended by a newer "
                       r"iter\(rebatch\) or rebatch.set_state\(\): one iterator per Rebatch"):
        next(old)
    assert len(ids(newest)) == len(rebatch)  # the newest serves its whole pass
    closed = iter(rebatch)
    closed.close()
    with pytest.raises(StopIteration):  # closed by hand: ended, not stale
        next(closed)
