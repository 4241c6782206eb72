"""Issue 9, "What fails today": one test per numbered failure, against the sources
contract of the rebuild (one owner of position, explicit kinds)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import DataraxError, SourceContractError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import json_round_trip, to_host

needs_array_record = pytest.mark.skipif(
    importlib.util.find_spec("array_record") is None, reason="needs array_record"
)


def ids(batches: list[Any], field: str) -> list[int]:
    return [int(i) for b in batches for i in np.asarray(b[field])]


def memory_pipeline(
    n: int = 20, *, shuffle: bool = True, seed: int = 42, batch_size: int = 4
) -> Pipeline:
    source = MemorySource(
        MemorySourceConfig(shuffle=shuffle, seed=seed), {"x": np.arange(n, dtype=np.int32)}
    )
    return Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))


# ------------------------------------------- 1. seed 000 "Checkpointing" through a Pipeline
@pytest.fixture(scope="module")
def thousand_records(tmp_path_factory):
    pytest.importorskip("array_record")
    from reliability_arrayrecord import write_files

    return write_files(tmp_path_factory.mktemp("ar1000"), 1000, num_files=2)


def _seed000_pipeline(kind: str, paths: str | None) -> Pipeline:
    if kind == "memory_shuffled":
        source: Any = MemorySource(
            MemorySourceConfig(shuffle=True), {"id": np.arange(1000, dtype=np.int32)}
        )
    else:
        from reliability_arrayrecord import Decode

        from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=42, shuffle_files=kind == "array_record_shuffled"),
            paths=paths,
            decode=Decode(),
            rngs=nnx.Rngs(0),
        )
    return Pipeline(source=source, stages=[], batch_size=50, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("array_record", marks=needs_array_record),
        pytest.param("array_record_shuffled", marks=needs_array_record),
        "memory_shuffled",
    ],
)
def test_1_source_state_after_three_batches_resumes_the_pipeline(kind, request):
    paths = request.getfixturevalue("thousand_records") if kind.startswith("array") else None
    pipeline = _seed000_pipeline(kind, paths)
    iterator = iter(pipeline)
    served = [to_host(next(iterator)) for _ in range(3)]
    state = json_round_trip(pipeline.source.get_state(), "source.get_state()")
    # The state describes what the consumer received, not what read-ahead threads read.
    assert state["current_index"] == 150 and state["current_epoch"] == 0
    rest_expected = [to_host(b) for b in iterator]
    iterator.close()
    pipeline.source.close()

    fresh = _seed000_pipeline(kind, paths)
    fresh.source.set_state(state)
    rest = [to_host(b) for b in fresh]
    fresh.source.close()
    assert len(ids(rest, "id")) == 850
    assert ids(rest, "id") == ids(rest_expected, "id")
    assert sorted(ids(served, "id") + ids(rest, "id")) == list(range(1000))


# ------------------------------------------------- 2. a state taken at an epoch's end
# (the rule is issue 26's, which corrected issue 9's: docs/reliability.md, "Epoch ends")
def test_2_iterator_state_after_the_last_batch_restores_to_an_empty_pass():
    reference = memory_pipeline()
    epoch0, epoch1 = [to_host(b) for b in reference], [to_host(b) for b in reference]
    assert ids(epoch0, "x") != ids(epoch1, "x")  # shuffled: a new order each epoch

    pipeline = memory_pipeline()
    iterator = iter(pipeline)
    for _ in range(5):  # the last batch of 20 records in batches of 4
        next(iterator)
    state = json_round_trip(iterator.get_state())
    assert (state["epoch"], state["position"]) == (0, 20)  # epoch 0, nothing left
    fresh = memory_pipeline()
    fresh_iterator = iter(fresh)
    fresh_iterator.set_state(state)
    assert list(fresh_iterator) == []  # the saved for loop ends
    assert ids([to_host(b) for b in fresh], "x") == ids(epoch1, "x")


def test_2_pipeline_state_between_epochs_says_and_restores_the_next_epoch():
    reference = memory_pipeline()
    [to_host(b) for b in reference]
    epoch1 = [to_host(b) for b in reference]

    pipeline = memory_pipeline()
    for _ in pipeline:
        pass
    state = json_round_trip(pipeline.get_state())
    assert (state["epoch"], state["position"]) == (1, 0)
    fresh = memory_pipeline()
    fresh.set_state(state)
    assert ids([to_host(b) for b in fresh], "x") == ids(epoch1, "x")


# --------------------------------------------- 3. refusing a foreign state names the setting
def test_3_shuffle_true_state_into_shuffle_false_pipeline_names_shuffle():
    pipeline = memory_pipeline(shuffle=True, seed=42)
    iterator = iter(pipeline)
    next(iterator)
    state = json_round_trip(pipeline.get_state())
    other = memory_pipeline(shuffle=False, seed=1)
    with pytest.raises(StateError) as caught:
        other.set_state(state)
    message = str(caught.value)
    assert "shuffle" in message and "True" in message and "False" in message
    assert "shuffle" in (caught.value.field or "")
    if "seed" in message:  # a seed that does not apply may follow, never lead
        assert message.index("shuffle") < message.index("seed")


def test_3_seed_is_not_compared_when_shuffle_is_off():
    expected = [to_host(b) for b in memory_pipeline(shuffle=False, seed=42)]
    pipeline = memory_pipeline(shuffle=False, seed=42)
    iterator = iter(pipeline)
    next(iterator)
    state = json_round_trip(pipeline.get_state())
    other = memory_pipeline(shuffle=False, seed=1)
    other.set_state(state)  # the seed does not apply: accepted
    assert ids([to_host(b) for b in other], "x") == ids(expected[1:], "x")


# ------------------------------------------------- 4. a custom stream without restart()
@dataclass(frozen=True)
class TenConfig(StructuralConfig):
    """A stream of ten records."""


class TenRecords(DataSourceModule):
    """Seed 002's forward-only contract only: get_batch + element_spec, no restart()."""

    def __init__(self, config: TenConfig) -> None:
        super().__init__(config)
        self.left = list(range(10))

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        take, self.left = self.left[:batch_size], self.left[batch_size:]
        return {"x": np.asarray(take, np.int32)} if take else None

    def element_spec(self) -> dict[str, Any]:
        return {"x": jax.ShapeDtypeStruct((), np.int32)}


class RestartableTen(TenRecords):
    """The same stream with the documented way to begin a new pass."""

    def restart(self, epoch: int) -> None:
        self.left = list(range(10))


def test_4_stream_without_restart_refuses_a_second_pass():
    pipeline = Pipeline(source=TenRecords(TenConfig()), stages=[], batch_size=4)
    assert ids(list(pipeline), "x") == list(range(10))
    with pytest.raises(SourceContractError, match=r"restart\((self, )?epoch\)"):
        for _ in pipeline:
            pass


def test_4_stream_with_restart_serves_every_pass():
    pipeline = Pipeline(source=RestartableTen(TenConfig()), stages=[], batch_size=4)
    assert [ids(list(pipeline), "x") for _ in range(3)] == [list(range(10))] * 3


# ----------------------------------------------------- 5. saving the pipeline the NNX way
def test_5_nnx_state_round_trips_through_orbax_and_resumes(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    expected = [to_host(b) for b in memory_pipeline()]
    pipeline = memory_pipeline()
    iterator = iter(pipeline)
    first = to_host(next(iterator))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "data", nnx.state(pipeline))
        checkpointer.wait_until_finished()
        fresh = memory_pipeline()
        restored = checkpointer.restore(tmp_path / "data", nnx.state(fresh))
    nnx.update(fresh, restored)
    rest = [to_host(b) for b in fresh]
    assert ids([first] + rest, "x") == ids(expected, "x")


def test_5_nnx_update_after_one_batch_continues_the_epoch():
    expected = [to_host(b) for b in memory_pipeline()]
    old = memory_pipeline()
    iterator = iter(old)
    next(iterator)
    fresh = memory_pipeline()
    nnx.update(fresh, nnx.state(old))
    assert ids([to_host(b) for b in fresh], "x") == ids(expected[1:], "x")


def test_5_nnx_state_holds_arrays_only_and_not_the_dataset():
    pipeline = memory_pipeline(n=1000)
    next(iter(pipeline))
    leaves = jax.tree.leaves(nnx.state(pipeline))
    assert leaves
    for leaf in leaves:
        assert isinstance(leaf, (np.ndarray, jax.Array)), type(leaf)
        assert np.size(leaf) < 1000


# ------------------------------------------------------ 6. two live iterators of one pipeline
def test_6_a_newer_iterator_ends_the_older_one():
    from datarax.core.errors import StaleIteratorError

    pipeline = memory_pipeline()
    a = iter(pipeline)
    b = iter(pipeline)
    first_of_b = next(b)
    with pytest.raises(StaleIteratorError, match="newer iter") as caught:
        next(a)
    assert isinstance(caught.value, DataraxError)
    # The pipeline's state is b's, whole (b's epoch and b's position), and b goes on.
    assert pipeline.get_state() == b.get_state()
    rest_of_b = [to_host(batch) for batch in b]
    assert sorted(ids([to_host(first_of_b)] + rest_of_b, "x")) == list(range(20))


# --------------------------------------------- 7. base-class names vs user attribute names
@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    """Twelve rows of three features."""


class UserRows(DataSourceModule):
    """A CSV-like indexed source whose own attributes use natural private names."""

    def __init__(self, config: RowsConfig) -> None:
        super().__init__(config)
        self._shard = 5  # the user's own file shard number
        self._cursor = None  # the user's own (unused) file cursor
        self._length = 3  # features per row
        self.data = nnx.data(jnp.arange(12 * 3, dtype=jnp.float32).reshape(12, 3))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> dict[str, Any]:
        return {"features": self.data[(jnp.arange(size) + start) % len(self)]}

    def element_spec(self) -> dict[str, Any]:
        return {"features": jax.ShapeDtypeStruct((self._length,), np.float32)}


def test_7_user_attributes_named_like_base_internals_keep_working():
    source = UserRows(RowsConfig())
    batches = list(Pipeline(source=source, stages=[], batch_size=5))
    assert [int(r) for b in batches for r in np.asarray(b["features"])[:, 0] / 3] == list(range(12))

    sharded = UserRows(RowsConfig())
    pipeline = Pipeline(source=sharded, stages=[], batch_size=5, shard_index=1, shard_count=3)
    assert [int(r) for b in pipeline for r in np.asarray(b["features"])[:, 0] / 3] == [4, 5, 6, 7]
    sharded.set_shard(2, 3)
    for src in (source, sharded):  # the user's values are untouched
        assert (src._shard, src._cursor, src._length) == (5, None, 3)
    state = json_round_trip(source.get_state())
    assert {"current_index", "current_epoch"} <= set(state)
