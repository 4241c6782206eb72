"""CachedPrefix: values equal the uncached stages, each record computed once while
the cache has room, the max_bytes bound, exact resume, refusals."""

from dataclasses import dataclass

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError
from datarax.dag import CachedPrefix
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.sources.random_access import RandomAccessSource
from datarax.testing import check_resume_exact

N = 10


@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    shuffle: bool = True
    seed: int = 3


class Rows(RandomAccessSource):
    """Record i is {"x": [i, -i] (float32), "name": "r{i}"}; counts records read."""

    def __init__(self, n=N):
        super().__init__(RowsConfig(), num_threads=1)
        self.n = n
        self.reads = [0]

    def __len__(self):
        return self.n

    def read_records(self, indices):
        self.reads[0] += len(indices)
        return [{"x": np.asarray([i, -i], np.float32), "name": f"r{i}"} for i in indices]


class Expensive:
    """A deterministic stage that counts the records it computes."""

    def __init__(self):
        self.calls = 0

    def __call__(self, batch):
        self.calls += len(batch["name"])
        return {**batch, "x": batch["x"] * 3 + 1}


def jitter(element, key):
    return {**element.data, "noise": jax.random.uniform(key, ())}


def noise():
    return ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)


def epochs(pipeline, n):
    out = []
    for _ in range(n):
        out.append([(np.asarray(b["x"]).tolist(), list(b["name"])) for b in pipeline])
    return out


def test_values_equal_the_uncached_stages_and_each_record_is_computed_once():
    stage = Expensive()
    cached = CachedPrefix(Rows(), [stage], max_bytes=1 << 20)
    got = epochs(Pipeline(source=cached, stages=[], batch_size=4), 3)
    plain = epochs(Pipeline(source=Rows(), stages=[Expensive()], batch_size=4), 3)
    assert got == plain
    assert got[0] != got[1]  # a new shuffled order each epoch, served from the cache
    assert stage.calls == N and cached.inner.reads[0] == N
    info = cached.cache_info()
    assert (info["records"], info["misses"], info["full"]) == (N, N, False)
    assert info["bytes"] == N * (8 + 2)  # two float32 + a 2-character name ("r0".."r9")
    cached.close()


def test_past_max_bytes_the_cache_stops_adding_and_keeps_computing():
    stage = Expensive()
    cached = CachedPrefix(Rows(), [stage], max_bytes=4 * 10)  # room for 4 records
    got = epochs(Pipeline(source=cached, stages=[], batch_size=4), 3)
    assert got == epochs(Pipeline(source=Rows(), stages=[Expensive()], batch_size=4), 3)
    info = cached.cache_info()
    assert (info["records"], info["bytes"], info["full"]) == (4, 40, True)
    cached.close()  # (the reader read the next epoch's start ahead, or dropped it)
    # the 6 left out are computed every epoch (and once more where read ahead)
    assert stage.calls - (N + 2 * (N - 4)) in (0, N - 4)


def test_stochastic_stages_after_the_cache_draw_anew_each_epoch_and_resume_exactly():
    def make():
        return Pipeline(source=CachedPrefix(Rows(), [Expensive()], max_bytes=1 << 20),
                        stages=[noise()], batch_size=3, rngs=nnx.Rngs(2))

    first = Pipeline(source=CachedPrefix(Rows(), [Expensive()], max_bytes=1 << 20),
                     stages=[noise()], batch_size=N, rngs=nnx.Rngs(2))
    e0, e1 = (dict(zip(b["name"], np.asarray(b["noise"]).tolist())) for b in
              (next(iter(first)), next(iter(first))))
    assert e0.keys() == e1.keys() and e0 != e1
    report = check_resume_exact(make, range(13), num_epochs=3,
                                close=lambda p: p.source.close())
    assert report.batches_per_epoch == (4, 4, 4) and report.num_records == 3 * N


def test_refusals():
    with pytest.raises(ConfigError, match=r"CachedPrefix stage 1 \(ElementOperator\) is "
                       r"stochastic"):
        CachedPrefix(Rows(), [Expensive(), noise()], max_bytes=100)
    memory = MemorySource(MemorySourceConfig(), {"x": np.zeros(3, np.float32)})
    with pytest.raises(ConfigError, match="CachedPrefix needs a RandomAccessSource .* got "
                       "MemorySource"):
        CachedPrefix(memory, [], max_bytes=100)
    with pytest.raises(ConfigError, match=r"max_bytes must be an int >= 0, got -1"):
        CachedPrefix(Rows(), [], max_bytes=-1)
    with pytest.raises(ConfigError, match="CachedPrefix stages must be a list of deterministic "
                       r"stages, got NoneType; pass \[\] for none"):
        CachedPrefix(Rows(), None, max_bytes=100)
    with pytest.raises(ConfigError, match="CachedPrefix stage 0 is int, neither an operator"):
        CachedPrefix(Rows(), [3], max_bytes=100)


def scale(element, key=None):
    return {**element.data, "x": element.data["x"] * 2}


def deterministic_op():
    return ElementOperator(ElementOperatorConfig(stochastic=False), fn=scale)


def test_a_deterministic_operator_prefix_and_nnx_state_resume():
    cached = CachedPrefix(Rows(), [deterministic_op()], max_bytes=1 << 20)
    pipeline = Pipeline(source=cached, stages=[], batch_size=4)
    iterator = iter(pipeline)
    head = np.asarray(next(iterator)["x"]).tolist()
    fresh = CachedPrefix(Rows(), [deterministic_op()], max_bytes=1 << 20)  # empty cache
    restored = Pipeline(source=fresh, stages=[], batch_size=4)
    nnx.update(restored, nnx.state(pipeline))
    resumed = [np.asarray(b["x"]).tolist() for b in restored]
    rest = [np.asarray(b["x"]).tolist() for b in iterator]
    assert resumed == rest
    assert sorted(r[0] for b in [head, *rest] for r in b) == [2.0 * i for i in range(N)]
    cached.close()
    fresh.close()


def test_over_an_array_record_source(tmp_path):
    from int_record_files import write_parts

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    paths = write_parts(tmp_path, (range(0, 6), range(6, N)),
                        lambda i: np.asarray([i, -i], np.float32).tobytes())

    def records():
        return ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=3, shuffle_files=True), paths,
            decode=lambda raw: {"x": np.frombuffer(raw, np.float32),
                                "name": f"r{int(np.frombuffer(raw, np.float32)[0])}"})

    stage = Expensive()
    cached = CachedPrefix(records(), [stage], max_bytes=1 << 20)
    got = epochs(Pipeline(source=cached, stages=[], batch_size=4), 2)
    plain = records()
    want = epochs(Pipeline(source=plain, stages=[Expensive()], batch_size=4), 2)
    assert got == want and got[0] != got[1]
    assert sorted(x[0] for b, _ in got[1] for x in b) == [3.0 * i + 1 for i in range(N)]
    assert stage.calls == N and cached.cache_info()["records"] == N
    cached.close()
    plain.close()


def test_a_source_without_read_records_is_refused():
    class Own(RandomAccessSource):  # serves batches its own way
        def __len__(self):
            return 3

    with pytest.raises(ConfigError, match="through read_records\\(indices\\), which Own does "
                       "not implement: it cannot be cached"):
        CachedPrefix(Own(RowsConfig()), [], max_bytes=100)


def test_max_bytes_takes_a_numpy_int():
    cached = CachedPrefix(Rows(), [Expensive()], max_bytes=np.int64(4 * 10))  # 4 records
    epochs(Pipeline(source=cached, stages=[], batch_size=4), 1)
    assert (cached.cache_info()["records"], cached.cache_info()["full"]) == (4, True)
    cached.close()
    with pytest.raises(ConfigError, match="CachedPrefix max_bytes must be an int >= 0, got 40.0"):
        CachedPrefix(Rows(), [Expensive()], max_bytes=40.0)
