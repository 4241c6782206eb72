"""One saved-state shape for every reading mode, restoring to the records the version 3
code served from the same positions; states of earlier versions are refused naming their
version; a plain restore never enters the elastic (other process count) code."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import StateError
from datarax.pipeline import Pipeline, elastic
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.sources.random_access import RandomAccessSource


@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    shuffle: bool = True
    seed: int = 3


class Rows(RandomAccessSource):
    """A host (cursor) source of ``x = i`` for 24 records."""

    def __len__(self) -> int:
        return 24

    def read_records(self, indices):
        return [{"x": np.int32(i)} for i in indices]


def build(kind: str, index: int, count: int) -> Pipeline:
    source = (MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                           {"x": np.arange(24, dtype=np.int32)})
              if kind == "indexed" else Rows(RowsConfig()))
    return Pipeline(source=source, batch_size=2, shard_index=index, shard_count=count,
                    rngs=nnx.Rngs(0))


def served(pipeline: Pipeline) -> list[list[int]]:
    return [np.asarray(b["x"]).tolist() for b in pipeline]


def _v4(kind: str, shard: list[int], resplit: bool) -> dict:
    """A state after one batch of 2 (shard 0 of 2), or after one batch of the re-split
    share that state gave shard 1 of 3."""
    state = {
        "version": 4, "epoch": 0, "position": 2,
        "settings": {"batch_size": 2, "drop_remainder": False,
                     "source": "MemorySource" if kind == "indexed" else "Rows",
                     "num_records": 24, "shard": shard, "source.shuffle": True,
                     "source.seed": 3, "stages": "e3b0c44298fc", "rngs": "15ec7bf0b507"},
    }
    state["source"] = {"current_index": 2, "current_epoch": 0}
    if kind == "host":
        state["source"].update(skipped=0, prefetch_cache=0)
    if resplit:
        state["share"] = {"epoch": 0, "history": [[2, 2]]}
    return state


OLD = {name: _v4(kind, shard, resplit)
       for kind in ("indexed", "host")
       for name, shard, resplit in ((f"{kind} on 2", [0, 2], False),
                                    (f"{kind} re-split on 3", [1, 3], True))}
# what the version 3 code served after restoring each state on 2 and 3 processes
SERVED = {
    "on 2 -> 2": [[[11, 8], [17, 5], [10, 19], [21, 15], [3, 12]],
                  [[0, 22], [14, 20], [2, 23], [18, 13], [9, 6]]],
    "on 2 -> 3": [[[11, 8], [17, 5], [10, 19]], [[21, 15], [3, 12], [0, 22]],
                  [[14, 20], [2, 23], [18, 13]]],
    "re-split on 3 -> 2": [[[17, 5], [10, 19], [3, 12]], [[0, 22], [2, 23], [18, 13]]],
    "re-split on 3 -> 3": [[[17, 5], [10, 19]], [[3, 12], [0, 22]], [[2, 23], [18, 13]]],
}


@pytest.mark.parametrize("kind", ["indexed", "host"])
@pytest.mark.parametrize("case", sorted(SERVED))
def test_a_state_restores_to_the_records_the_version_3_code_did(kind, case):
    name, count = case.rsplit(" -> ", 1)
    state = copy.deepcopy(OLD[f"{kind} {name}"])
    assert [served(p) for p in map(lambda j: _restored(kind, j, int(count), state),
                                   range(int(count)))] == SERVED[case]
    assert state == OLD[f"{kind} {name}"]  # the caller's dict is left as it was


def _restored(kind: str, index: int, count: int, state: dict) -> Pipeline:
    pipeline = build(kind, index, count)
    pipeline.set_state(state)
    return pipeline


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_every_reading_mode_saves_one_shape(kind):
    pipeline = build(kind, 1, 3)
    pipeline.set_state(OLD[f"{kind} on 2"])  # re-split from 2 processes to 3
    iterator = iter(pipeline)
    next(iterator)
    state = pipeline.get_state()
    assert sorted(state) == ["epoch", "position", "settings", "share", "source", "version"]
    assert (state["version"], state["epoch"], state["position"]) == (4, 0, 2)
    assert state["share"] == {"epoch": 0, "history": [[2, 2]]}
    assert (state["source"]["current_index"], state["source"]["current_epoch"]) == (2, 0)
    # saved again, it restores where the state it was restored from did
    again = [_restored(kind, j, 2, state) for j in range(2)]
    assert [served(p) for p in again] == SERVED["re-split on 3 -> 2"]
    plain = build(kind, 0, 2)
    plain.set_state(again[0].get_state())  # a pass that ended: the next epoch's start
    assert sorted(plain.get_state()) == ["epoch", "position", "settings", "source", "version"]
    assert (plain.epoch, plain.position) == (1, 0)


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_a_plain_restore_never_enters_the_elastic_code(kind, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a plain restore entered pipeline.elastic")

    monkeypatch.setattr(elastic, "restore", refuse)
    for index in range(2):  # its own state, and another process's of the same count
        pipeline = build(kind, index, 2)
        pipeline.set_state(OLD[f"{kind} on 2"])
        assert served(pipeline) == SERVED["on 2 -> 2"][index]
    with pytest.raises(AssertionError, match="entered pipeline.elastic"):
        build(kind, 0, 3).set_state(OLD[f"{kind} on 2"])


@pytest.mark.parametrize("version", [2, 3, 5])
def test_a_state_of_another_version_is_refused_naming_it(version):
    # versions 2 and 3: their share called "elastic", no "source" for a compiled read
    state = {**{k: v for k, v in OLD["indexed re-split on 3"].items()
                if k not in ("share", "source")},
             "version": version, "elastic": {"epoch": 0, "history": [[2, 2]]}}
    with pytest.raises(StateError, match=rf"Pipeline state version {version} is not 4, the "
                       r"only version this datarax restores \(2 and 3 are earlier releases' "
                       r"states\); restore it with the datarax release that saved it, or "
                       r"start the epoch again with a fresh pipeline") as err:
        build("indexed", 0, 2).set_state(state)
    assert err.value.field == "version"
