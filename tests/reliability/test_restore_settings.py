"""A source state restored into a source built with other order settings is refused,
naming the setting, through the source's own set_state as through the pipeline's."""

from __future__ import annotations


import numpy as np
import pytest
from flax import nnx
from int_record_files import int32, write_records

from datarax.core.errors import StateError
from datarax.dag import CachedPrefix
from datarax.pipeline import Pipeline
from datarax.sources import (
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    MemorySource,
    MemorySourceConfig,
    NpySource,
    NpySourceConfig,
)
from datarax.testing import json_round_trip


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("cached")
    return write_records(folder / "ids.array_record", map(int32, range(12)))


def _decode(record: bytes) -> dict[str, np.ndarray]:
    return {"id": np.frombuffer(record, np.int32)[0]}


def _cached(path: str, seed: int = 1, shuffle: bool = True) -> CachedPrefix:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=seed, shuffle_files=shuffle),
                                     path, decode=_decode, num_threads=1)
    return CachedPrefix(source, [lambda b: {"id": b["id"] + 1000}], max_bytes=1 << 20)


def _ids(pipeline: Pipeline) -> list[int]:
    return [int(i) for batch in pipeline for i in np.asarray(batch["id"])]


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 2}, "saved with seed=1 but this source has seed=2"),
    ({"shuffle": False}, "saved with shuffle_files=True but this source has shuffle_files=False"),
])
def test_a_cached_prefix_state_into_another_cached_source_is_refused(records, change, message):
    saved = _cached(records)
    head = Pipeline(source=saved, batch_size=3, rngs=nnx.Rngs(0))
    iterator = iter(head)
    next(iterator)
    state = json_round_trip(saved.get_state())
    other = _cached(records, **change)
    with pytest.raises(StateError, match=f"CachedPrefix state was {message}"):
        other.set_state(state)
    for source in (saved, other):
        source.close()


def test_a_cached_prefix_state_continues_in_an_identical_one(records):
    reference = Pipeline(source=_cached(records), batch_size=3, rngs=nnx.Rngs(0))
    epoch = _ids(reference)
    head_source = _cached(records)
    iterator = iter(Pipeline(source=head_source, batch_size=3, rngs=nnx.Rngs(0)))
    got = [int(i) for i in np.asarray(next(iterator)["id"])]
    state = json_round_trip(head_source.get_state())
    fresh = _cached(records)
    fresh.set_state(state)
    assert got + _ids(Pipeline(source=fresh, batch_size=3, rngs=nnx.Rngs(0))) == epoch
    fresh.set_state({"current_index": 3, "current_epoch": 0})  # a bare position: taken as is
    assert _ids(Pipeline(source=fresh, batch_size=3, rngs=nnx.Rngs(0))) == epoch[3:]
    for source in (reference.source, head_source, fresh):
        source.close()


def _memory(**config) -> MemorySource:
    return MemorySource(MemorySourceConfig(**config), {"id": np.arange(12, dtype=np.int32)})


def _array_record(path: str, **config) -> ArrayRecordSourceModule:
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), path, decode=_decode)


def _npy(folder, **config) -> NpySource:
    return NpySource(NpySourceConfig(paths={"id": str(folder / "a.npy")}, **config))


@pytest.fixture(scope="module")
def npy_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("npy")
    np.save(folder / "a.npy", np.arange(12, dtype=np.int32))
    return folder


@pytest.mark.parametrize(("kind", "saved", "changed", "message"), [
    ("memory", {"shuffle": True, "seed": 1}, {"shuffle": True, "seed": 2},
     "MemorySource state was saved with seed=1 but this source has seed=2"),
    ("memory", {"shuffle": True, "seed": 1}, {"shuffle": False},
     "MemorySource state was saved with shuffle=True but this source has shuffle=False"),
    ("array_record", {"shuffle_files": True, "seed": 1}, {"shuffle_files": True, "seed": 2},
     r"ArrayRecordSourceModule state was saved with seed=1 \(shuffled_indices.seed\) but "
     "this source has 2"),
    ("npy", {"shuffle": True, "seed": 1}, {"shuffle": True, "seed": 2},
     "NpySource state was saved with seed=1 but this source has seed=2"),
])
def test_a_source_state_restored_into_another_seed_is_refused(
    records, npy_folder, kind, saved, changed, message
):
    build = {"memory": _memory, "array_record": lambda **c: _array_record(records, **c),
             "npy": lambda **c: _npy(npy_folder, **c)}[kind]
    head = build(**saved)
    iterator = iter(Pipeline(source=head, batch_size=5, rngs=nnx.Rngs(0)))
    first = [int(i) for i in np.asarray(next(iterator)["id"])]
    state = json_round_trip(head.get_state())  # the seed page's checkpoint route
    with pytest.raises(StateError, match=message):
        build(**changed).set_state(state)
    # the same settings continue exactly: the rest of the saved epoch, each record once
    same = build(**saved)
    same.set_state(state)
    rest = [int(i) for b in Pipeline(source=same, batch_size=5, rngs=nnx.Rngs(0))
            for i in np.asarray(b["id"])]
    assert sorted(first + rest) == list(range(12))
    for source in (head, same):
        source.close()


def test_a_shuffled_memory_state_into_another_record_count_is_refused_an_older_one_restores():
    head = _memory(shuffle=True, seed=1)
    first = [int(i) for i in np.asarray(next(iter(Pipeline(source=head, batch_size=5)))["id"])]
    state = json_round_trip(head.get_state())
    assert state["records"] == 12
    longer = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                          {"id": np.arange(13, dtype=np.int32)})
    with pytest.raises(StateError, match="saved with records=12 but this source holds 13") as err:
        longer.set_state(state)
    assert err.value.field == "records"
    older = _memory(shuffle=True, seed=1)  # a state saved before 'records' was written
    older.set_state({k: v for k, v in state.items() if k != "records"})
    rest = [int(i) for b in Pipeline(source=older, batch_size=5) for i in np.asarray(b["id"])]
    assert sorted(first + rest) == list(range(12))
    assert "records" not in _memory().get_state()  # unshuffled: the position alone
