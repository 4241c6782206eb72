"""A source state restored into a source built with other order settings is refused,
naming the setting, through the source's own set_state as through the pipeline's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from flax import nnx

from datarax.core.errors import StateError
from datarax.dag import CachedPrefix
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cached") / "ids.array_record")
    writer = ArrayRecordWriter(path, "group_size:1")
    for i in range(12):
        writer.write(np.int32(i).tobytes())
    writer.close()
    return path


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
    state = json.loads(json.dumps(saved.get_state()))
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
    state = json.loads(json.dumps(head_source.get_state()))
    fresh = _cached(records)
    fresh.set_state(state)
    assert got + _ids(Pipeline(source=fresh, batch_size=3, rngs=nnx.Rngs(0))) == epoch
    with pytest.raises(StateError, match="with 'settings'"):
        fresh.set_state({"current_index": 3, "current_epoch": 0})
    for source in (reference.source, head_source, fresh):
        source.close()
