"""A source's own state (``source.get_state()``) taken on a share of several processes.

Its position counts that share's records, so restoring it with ``source.set_state`` on
another process count served some records twice and others never, without a word: the
state now names its shard and such a restore is refused, pointing at the pipeline's
state (which re-splits the rest of the epoch). The same shard restores exactly, and a
state without a shard (one process's, or saved by an earlier datarax) as before.
"""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import StateError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def memory(folder) -> MemorySource:
    return MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                        {"x": np.arange(20, dtype=np.int32)})


def npy(folder) -> NpySource:
    path = folder / "x.npy"
    if not path.exists():
        np.save(path, np.arange(20, dtype=np.int32))
    return NpySource(NpySourceConfig(paths=str(path), field="x", shuffle=True, seed=5))


def shares(make, folder, count: int) -> list[Pipeline]:
    return [Pipeline(source=make(folder), batch_size=2, shard_index=i, shard_count=count)
            for i in range(count)]


def batches(pipeline: Pipeline) -> list[list[int]]:
    return [np.asarray(b["x"]).tolist() for b in pipeline]


@pytest.mark.parametrize("make", [memory, npy], ids=["memory", "npy"])
def test_a_share_state_on_another_process_count_is_refused(tmp_path, make):
    old = shares(make, tmp_path, 2)
    served = [x for p in old for x in np.asarray(next(iter(p))["x"]).tolist()]
    state = old[0].source.get_state()
    assert state["settings"]["shard"] == "0 of 2"
    for count in (1, 4):
        new = Pipeline(source=make(tmp_path), batch_size=2, shard_index=0, shard_count=count)
        with pytest.raises(StateError) as caught:
            new.source.set_state(state)
        assert caught.value.field == "shard"
        assert (f"state was saved with shard='0 of 2' but this source has shard='0 of {count}'"
                in str(caught.value))
        assert "restore the pipeline's state (pipeline.set_state" in str(caught.value)
    # the pipeline's state restores there, each record once in the epoch
    whole = Pipeline(source=make(tmp_path), batch_size=2, shard_index=0, shard_count=1)
    whole.set_state(old[0].get_state())
    assert sorted(served + sum(batches(whole), [])) == list(range(20))


@pytest.mark.parametrize("make", [memory, npy], ids=["memory", "npy"])
def test_a_share_state_restores_its_own_shard_exactly(tmp_path, make):
    old = shares(make, tmp_path, 2)[1]
    iterator = iter(old)
    next(iterator)
    state = old.source.get_state()
    rest = [np.asarray(b["x"]).tolist() for b in iterator]
    new = shares(make, tmp_path, 2)[1]
    new.source.set_state(state)
    assert batches(new) == rest


def test_a_state_without_a_shard_restores_as_before(tmp_path):
    one = Pipeline(source=memory(tmp_path), batch_size=2)
    next(iter(one))
    state = one.source.get_state()
    assert "shard" not in state["settings"]  # one process: the state is as it was
    shard = shares(memory, tmp_path, 2)[0]
    shard.source.set_state(state)  # as an earlier datarax's state: a position alone
    assert shard.source.index == 2
