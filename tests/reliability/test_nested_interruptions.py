"""Combinators nested two deep, interrupted every documented way (probes109's fuzz,
two of its cases fixed).

``test_combinations_model.py`` checks one level of ``ConcatSource`` / ``MixSource`` /
``InterleaveSource`` / ``ShuffleBufferSource``; here they nest (an interleave of shuffle
buffers over a concatenation and a flat map; a mixture of an interleave and a
concatenation) over every source kind, with a filter and a random stage, and each pass
is interrupted: a state saved mid-epoch (JSON) restored into a new pipeline, a ``break``
followed by a new loop or by ``set_state(get_state())``, a stage raising mid-pass, a
stream's read raising. Each serves the uninterrupted run's batches, byte for byte.
"""

from __future__ import annotations

import json
import jax
import numpy as np
import pytest

from datarax.mixing import MixSource
from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import (ArrayRecordSourceConfig, ArrayRecordSourceModule, ConcatSource,
                             FlatMapSource, InterleaveSource, NpySource, NpySourceConfig,
                             ShuffleBufferSource)

from int_record_files import int32, write_parts
from number_sources import NumberStream, numbers


def drop_3_mod_4(record):
    """A flat map that filters: no record for ids 3, 7, 11, ..."""
    v = int(record["id"])
    return [] if v % 4 == 3 else [{"id": np.int32(v)}]


def interleaved_buffers(tmp_path, fail_on_read=None):
    """Shuffle buffers over a concatenation (memory + stream) and over a flat map of an
    NpySource, interleaved."""
    np.save(tmp_path / "ids.npy", np.arange(200, 215, dtype=np.int32))
    npy = NpySource(NpySourceConfig(paths=str(tmp_path / "ids.npy"), field="id"))
    stream = NumberStream(100, 107, field="id", fail_on_read=fail_on_read,
                          most_per_read=2)
    return InterleaveSource([
        ShuffleBufferSource(ConcatSource([numbers(0, 9, field="id"), stream]), buffer_size=4,
                            seed=1),
        ShuffleBufferSource(FlatMapSource(npy, drop_3_mod_4, max_outputs=1), buffer_size=3,
                            seed=2)], cycle_length=2, block_length=3)


def mixed_interleave(tmp_path, fail_on_read=None):
    """A mixture of an interleave (memory, stream) and a concatenation (ArrayRecord files,
    a shuffled memory source)."""
    folder = tmp_path / "ar"
    if not folder.exists():
        folder.mkdir()
        write_parts(folder, [range(200, 206), range(206, 212)], int32)
    files = sorted(str(p) for p in folder.iterdir())
    records = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(), files,
        decode=lambda r: {"id": np.frombuffer(r, np.int32)[0]}, num_threads=2)
    inter = InterleaveSource([numbers(0, 8, field="id"),
                              NumberStream(100, 110, field="id", fail_on_read=fail_on_read,
                          most_per_read=2)],
                             cycle_length=2, block_length=2)
    concat = ConcatSource([records, numbers(300, 305, shuffle=True, seed=4, field="id")])
    return MixSource([inter, concat], [18, 17], seed=3, records_per_epoch=35)


CASES = {  # build, records, shard_count, shard_index, prefetch
    "interleaved_buffers": (interleaved_buffers,
                            [*range(9), *range(100, 107),
                             *(i for i in range(200, 215) if i % 4 != 3)], 2, 1, 2),
    "mixed_interleave": (mixed_interleave,
                         [*range(8), *range(100, 110), *range(200, 212), *range(300, 305)],
                         1, 0, 0),
}
ARMED: dict[str, int | None] = {"id": None}


def _trip(v):
    if ARMED["id"] is not None and int(v) == ARMED["id"]:
        ARMED["id"] = None
        raise RuntimeError("the stage broke")
    return np.asarray(v)


def tripwire(element, key=None):
    """Raises (on the host, mid-pass) at the record ``ARMED["id"]``, once."""
    out = jax.pure_callback(_trip, jax.ShapeDtypeStruct((), np.int32), element.data["id"],
                            vmap_method="sequential")
    return element.update_data({"id": out})


def noise(element, key):
    return element.update_data({"noise": jax.random.uniform(key, (2,))})


def batches(pipeline_or_iterator) -> list[tuple[list[int], bytes]]:
    return [(np.asarray(b["id"]).tolist(), np.asarray(b["noise"]).tobytes())
            for b in pipeline_or_iterator]


@pytest.mark.parametrize("name", list(CASES))
def test_nested_combinations_resume_and_continue_exactly(name, tmp_path):
    build, records, count, index, prefetch = CASES[name]

    def make(fail_on_read=None, shard=index):
        stages = [FilterOperator(predicate=lambda el: el.data["id"] % 3 != 1),
                  ElementOperator(ElementOperatorConfig(), fn=tripwire),
                  ElementOperator(ElementOperatorConfig(stochastic=True), fn=noise)]
        return Pipeline(build(tmp_path, fail_on_read), stages=stages, batch_size=3, seed=0,
                        prefetch=prefetch, shard_index=shard, shard_count=count)

    reference = make()
    epochs = [batches(reference), batches(reference)]
    assert epochs[0] != epochs[1]
    kept = [i for i in records if i % 3 != 1]
    served = [i for s in range(count) for ids, _ in batches(make(shard=s)) for i in ids]
    assert len(set(served)) == len(served) and set(served) <= set(kept)  # disjoint shards
    if count == 1:
        assert sorted(served) == sorted(kept)

    # a state saved at batch 3, through JSON, restored into a new pipeline
    first = make()
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    resumed = make()
    resumed.set_state(json.loads(json.dumps(first.get_state())))
    assert batches(resumed) == epochs[0][3:]
    assert batches(resumed) == epochs[1]

    # a break, then set_state(get_state()): the rest of the epoch; a break, then a loop:
    # the next epoch
    for pipeline, after in ((make(), "continue"), (make(), "next epoch")):
        for i, _ in enumerate(pipeline):
            if i == 1:
                break
        if after == "continue":
            pipeline.set_state(pipeline.get_state())
            assert batches(pipeline) == epochs[0][2:]
        else:
            assert batches(pipeline) == epochs[1]

    # a stage raising mid-pass: a new loop continues the pass, each record once
    pipeline = make()
    ARMED["id"] = epochs[0][len(epochs[0]) // 2][0][0]
    try:
        with pytest.raises(Exception, match="the stage broke"):
            batches(iter(pipeline))
    finally:
        ARMED["id"] = None
    assert batches(pipeline) == epochs[0][len(epochs[0]) // 2:]

    # a stream's read raising: next() again continues, each record once
    pipeline, got = make(fail_on_read=3), []
    iterator = iter(pipeline)
    with pytest.raises(OSError, match="the disk hiccuped"):
        while True:
            got.append(next(iterator))
    assert batches(got) + batches(iterator) == epochs[0]
