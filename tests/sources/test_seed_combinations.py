"""The seed pages' promises combined: ArrayRecord (seed 000) and the data-sources guide
(seed 002) with shuffle, seed, epochs, shards, resume, bad records and operators together,
checked record by record against plain-NumPy references."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("array_record")
from int_record_files import runs, write_parts  # noqa: E402

from datarax.operators import ElementOperator, ElementOperatorConfig  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.samplers import index_shuffle_np  # noqa: E402
from datarax.sources import (  # noqa: E402
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    MemorySource,
    MemorySourceConfig,
)
from datarax.testing import json_round_trip  # noqa: E402

SIZES = (7, 11, 5, 9)  # 32 records in 4 files
N = sum(SIZES)


def write(directory, bad=()):
    return write_parts(directory, runs(SIZES),
                       lambda i: np.full(2 if i in bad else 3, i, np.float32).tobytes(),
                       name="data-{:05d}.riegeli")


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"data": np.frombuffer(record, dtype=np.float32)}


def order(seed, epoch, n=N):
    return index_shuffle_np(np.arange(n), n - 1, seed + epoch).tolist()


def noise(element, key):
    return element.update_data({"noise": jax.random.uniform(key)})


def scale(element, key=None):
    return element.update_data({"data": element.data["data"] * 2.0 + 1.0})


def stages():
    return [
        ElementOperator(ElementOperatorConfig(stochastic=False), fn=scale),
        ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="augment"),
                        fn=noise, rngs=nnx.Rngs(augment=5)),
    ]


def rows(batch):
    ids = ((np.asarray(batch["data"])[:, 0] - 1) / 2).astype(int).tolist()
    return list(zip(ids, np.asarray(batch["noise"]).tolist()))


def test_shuffled_sharded_array_record_resumes_into_fresh_objects(tmp_path):
    files = str(tmp_path / "data-*.riegeli")
    write(tmp_path)

    def build(shard):
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=7, num_epochs=10, shuffle_files=True),
            paths=files, decode=decode, rngs=nnx.Rngs(0))
        return source, Pipeline(source=source, stages=stages(), batch_size=5,
                                rngs=nnx.Rngs(0), shard_index=shard, shard_count=3)

    per = N // 3  # 10 records a shard, 2 left out of each epoch
    for shard in (0, 2):
        source, pipeline = build(shard)
        full = [[r for b in pipeline for r in rows(b)] for _ in range(2)]
        source.close()
        for epoch in range(2):
            assert [i for i, _ in full[epoch]] == order(7, epoch)[shard * per:(shard + 1) * per]
        source, pipeline = build(shard)
        iterator = iter(pipeline)
        head = rows(next(iterator))
        state = json_round_trip(source.get_state())
        assert state["current_index"] == 5 and state["shuffled_indices"] == {
            "seed": 7, "epoch": 0, "n": N}
        iterator.close()
        source.close()
        source, pipeline = build(shard)
        source.set_state(state)
        rest = [r for b in pipeline for r in rows(b)]
        assert head + rest == full[0]  # the same records, with the same per-record keys
        assert [r for b in pipeline for r in rows(b)] == full[1]
        source.close()


@pytest.mark.slow  # two compiled paths
def test_memory_source_matches_array_record_record_by_record(tmp_path):
    paths = write(tmp_path)
    data = [{"data": np.full(3, i, np.float32)} for i in range(N)]
    memory = MemorySource(MemorySourceConfig(shuffle=True, seed=7), data)
    files = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=7, shuffle_files=True),
                                    paths, decode=decode)
    got = {}
    for name, source, batch_size in (("memory", memory, 6), ("files", files, 9)):
        pipeline = Pipeline(source=source, stages=stages(), batch_size=batch_size,
                            rngs=nnx.Rngs(0), prefetch=0)
        got[name] = [[r for b in pipeline for r in rows(b)] for _ in range(2)]
    files.close()
    assert got["memory"] == got["files"]  # same order per epoch, same keys per record
    assert [i for i, _ in got["files"][1]] == order(7, 1)


def test_len_counts_every_record_and_a_skipping_epoch_serves_fewer_batches(tmp_path):
    bad = {3, 17, 18, 30}
    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(shuffle_files=True, seed=2, on_error="skip"),
        write(tmp_path, bad), decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    assert len(pipeline) == 8  # 32 records
    iterator = iter(pipeline)
    assert len(iterator) == 8
    served = [np.asarray(b["data"])[:, 0].astype(int).tolist() for b in iterator]
    assert [len(b) for b in served] == [4] * 7  # 28 good records, full batches
    assert sum(served, []) == [i for i in order(2, 0) if i not in bad]
    assert len(iterator) == 0
    assert source.get_state()["current_epoch"] == 1
    source.close()


def test_an_unshuffled_state_checks_on_error_and_the_position(tmp_path):
    from datarax.core.errors import StateError

    paths = write(tmp_path)

    def source(**config):
        return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, decode=decode)

    saved = source(seed=1)
    saved.get_batch(5)
    state = saved.get_state()
    assert state["settings"] == {"shuffle_files": False, "on_error": "raise",
                                 "files": state["files"]}
    assert state["shuffled_indices"] is None
    fresh = source(seed=2, num_epochs=3)  # neither changes an unshuffled epoch
    fresh.set_state(state)
    assert np.asarray(fresh.get_batch(2)["data"])[:, 0].tolist() == [5.0, 6.0]
    with pytest.raises(StateError, match="saved with on_error='raise' but this source has "
                       "on_error='skip'"):
        source(on_error="skip").set_state(state)
    with pytest.raises(StateError, match=r"'current_index' must be an int in \[0, \d+\] .*, got 33"):
        source().set_state({**state, "current_index": 33})
    for s in (saved, fresh):
        s.close()


def test_read_ahead_counts_whole_chunks_and_prefetch_cache_shows_them(tmp_path):
    paths = write(tmp_path)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths, decode=decode,
                                     num_threads=1, read_ahead=1)
    source.get_batch(4)  # batches under 64 records: chunks of 64 positions
    ahead = source.get_state()["prefetch_cache"]
    assert 0 <= ahead <= N - 4  # bounded by the chunks, never past the epoch
    rest = source.get_batch(N)
    assert np.asarray(rest["data"])[:, 0].tolist() == list(range(4, N))
    assert source.get_state()["prefetch_cache"] == 0
    source.close()


@pytest.mark.parametrize("declared, message", [
    ({"features": ((2,), np.float32)},
     "field 'features' has per-record shape (3,), declared (2,)"),
    ({"features": ((3,), np.int32)}, "field 'features' has dtype float32, declared int32"),
    ({"rows": ((3,), np.float32)}, "field 'rows' is declared in element_spec() but missing"),
])
def test_an_indexed_source_declaring_another_spec_than_it_serves_is_refused(declared, message):
    # The guide's custom-source contract: element_spec() describes exactly what
    # get_batch_at emits; a declaration that does not is named, not passed on.
    import re
    from dataclasses import dataclass

    import jax.numpy as jnp

    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule
    from datarax.core.errors import SpecMismatchError

    @dataclass(frozen=True)
    class RowsConfig(StructuralConfig):
        pass

    class Rows(DataSourceModule):
        def __init__(self, config):
            super().__init__(config)
            self.data = nnx.data(jnp.arange(12, dtype=jnp.float32).reshape(4, 3))

        def __len__(self):
            return 4

        def get_batch_at(self, start, size, key=None):
            return {"features": self.data[(jnp.arange(size) + start) % 4]}

        def element_spec(self):
            return {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in declared.items()}

    pipeline = Pipeline(source=Rows(RowsConfig()), stages=[], batch_size=3, rngs=nnx.Rngs(0))
    expected = (r"Rows\.get_batch_at\(0, size=1, key=None\) \(traced\) does not match "
                rf"element_spec\(\): .*{re.escape(message)}")
    with pytest.raises(SpecMismatchError, match=expected):
        pipeline.element_spec()
    with pytest.raises(SpecMismatchError, match=expected):
        next(iter(pipeline))
    assert pipeline.position == 0
