"""take / repeat / Rebatch states nest their pipeline's under "parent" and continue with
the batches the states saved before the nesting did; those (the pipeline's under
"pipeline", of version 3) are refused naming the earlier release."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datarax.core.errors import StateError
from datarax.pipeline import Pipeline, Rebatch
from datarax.sources import MemorySource, MemorySourceConfig

#: the pipeline state inside each literal below, as datarax wrote it before the nesting
SETTINGS = {"batch_size": 2, "drop_remainder": False, "source": "MemorySource",
            "num_records": 7, "shard": [0, 1], "source.shuffle": False,
            "stages": "e3b0c44298fc", "rngs": "15ec7bf0b507"}
# captured from datarax at 741c25f: take(3) after one batch, repeat(2) after five,
# Rebatch(split=2) after one part
OLD_TAKE = {"pipeline": {"version": 3, "epoch": 0, "position": 2, "settings": SETTINGS},
            "take": 3, "take_left": 2}
OLD_REPEAT = {"pipeline": {"version": 3, "epoch": 1, "position": 2, "settings": SETTINGS},
              "epochs_left": 1}
OLD_REBATCH = {"rebatch": {"mode": "split", "k": 2}, "part": 1,
               "pipeline": {"version": 3, "epoch": 0, "position": 0, "settings": SETTINGS}}


def make() -> Pipeline:
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(7, dtype=np.int32)})
    return Pipeline(source=src, batch_size=2, seed=0)


def xs(batches):
    return [np.asarray(b["x"]).tolist() for b in batches]


def test_each_state_nests_the_pipelines_under_parent():
    pipelines = [make(), make(), make()]
    take, repeat = pipelines[0].take(3), pipelines[1].repeat(2)
    next(take)
    for _ in range(5):
        next(repeat)
    rebatch = Rebatch(pipelines[2], split=2)
    next(iter(rebatch))
    for node, old, p in zip((take, repeat, rebatch), (OLD_TAKE, OLD_REPEAT, OLD_REBATCH),
                            pipelines):
        state = json.loads(json.dumps(node.get_state()))
        if node is not rebatch:  # a Rebatch's: before the batch being split
            assert state["parent"] == json.loads(json.dumps(p.get_state()))
        assert (state["parent"]["epoch"], state["parent"]["position"]) == (
            old["pipeline"]["epoch"], old["pipeline"]["position"])
        assert {k: v for k, v in state.items() if k != "parent"} == {
            k: v for k, v in old.items() if k != "pipeline"}


def test_a_nested_state_continues_with_the_batches_the_earlier_shape_did():
    def shaped(old):  # nested, its pipeline's state of version 4
        return {**{k: v for k, v in old.items() if k != "pipeline"},
                "parent": {**old["pipeline"], "version": 4, "source": {
                    "current_index": old["pipeline"]["position"],
                    "current_epoch": old["pipeline"]["epoch"]}}}

    take = make().take(3)
    take.set_state(shaped(OLD_TAKE))
    assert xs(take) == [[2, 3], [4, 5]]
    repeat = make().repeat(2)
    repeat.set_state(shaped(OLD_REPEAT))
    assert xs(repeat) == [[2, 3], [4, 5], [6]]
    rebatch = Rebatch(make(), split=2)
    rebatch.set_state(shaped(OLD_REBATCH))
    assert xs(rebatch) == [[i] for i in range(1, 7)]


@pytest.mark.parametrize("node", ["take", "repeat", "rebatch"])
def test_a_state_saved_before_the_nesting_is_refused_naming_the_earlier_release(node):
    where, old, made = {"take": ("Take", OLD_TAKE, lambda: make().take(3)),
                        "repeat": ("Repeat", OLD_REPEAT, lambda: make().repeat(2)),
                        "rebatch": ("Rebatch", OLD_REBATCH, lambda: Rebatch(make(), split=2)),
                        }[node]
    with pytest.raises(StateError, match=rf"{where}.set_state needs the dict .* It is an "
                       r"earlier datarax release's \(its pipeline's state, of version 3, under "
                       r"'pipeline'\): restore it with that release, or start the epoch again"):
        made().set_state(old)


def test_a_nested_take_state_given_to_the_pipeline_is_refused_naming_take():
    take = make().take(3)
    next(take)
    with pytest.raises(StateError, match=r"got the state of pipeline.take\(...\) \(keys "
                       r"\['parent', 'take', 'take_left'\]\).*Its 'parent' entry alone"):
        make().set_state(take.get_state())
    with pytest.raises(StateError, match="Repeat.set_state needs the dict Repeat.get_state"
                       r"\(\) returned, with keys 'epochs_left' and 'parent'"):
        make().repeat(2).set_state({"epochs_left": 1})



def test_a_rebatch_state_given_to_the_pipeline_is_refused_naming_rebatch():
    rebatch = iter(Rebatch(make(), split=2))
    next(rebatch)
    state = rebatch.get_state()
    with pytest.raises(StateError, match=r"got the state of a Rebatch \(keys \['parent', "
                       r"'part', 'rebatch'\]\).*rebatch.set_state\(state\)"):
        make().set_state(state)
    resumed = Rebatch(make(), split=2)  # where it belongs, it restores
    resumed.set_state(state)
    assert xs(resumed) == xs(Rebatch(make(), split=2))[1:]

@pytest.mark.parametrize("mode", [{"split": 2}, {"group": 2}])
def test_a_repeat_of_a_rebatch_nests_both_states_and_resumes_at_every_boundary(mode):
    whole = xs(Rebatch(make(), **mode).repeat(2))
    assert whole == xs(Rebatch(make(), **mode)) * 2
    for cut in range(len(whole) + 1):
        repeat = Rebatch(make(), **mode).repeat(2)
        head = [next(repeat) for _ in range(cut)]
        state = json.loads(json.dumps(repeat.get_state()))
        assert set(state) == {"epochs_left", "parent"}
        assert set(state["parent"]) == {"rebatch", "part", "parent"}
        resumed = Rebatch(make(), **mode).repeat(2)
        resumed.set_state(state)
        assert xs(head) + xs(resumed) == whole, cut


def test_take_and_repeat_say_what_they_wrap_and_what_is_left_in_repr():
    take = make().take(3)
    next(take)
    assert repr(take) == ("take(3) of a Pipeline over MemorySource with batch_size 2: "
                          "2 batches left")
    assert repr(make().repeat(None)) == ("repeat(None) of a Pipeline over MemorySource "
                                         "with batch_size 2: without end")
    assert repr(Rebatch(make(), group=2).repeat(2)) == (
        "repeat(2) of Rebatch(group=2) of a Pipeline over MemorySource with batch_size 2: "
        "2 passes left")
