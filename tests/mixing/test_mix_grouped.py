"""A compiled mixture's group of small batches is one read, equal to reading them one by one."""

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.indexed import IndexedSource
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline, dispatch
from datarax.sources import MemorySource, MemorySourceConfig


def memory(lo: int, n: int, shuffle: bool = False, seed: int = 0) -> MemorySource:
    ids = np.arange(lo, lo + n, dtype=np.int32)
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed),
                        {"id": ids, "x": np.stack([ids * 2.0, ids + 0.5], 1).astype(np.float32)})


def mixture(nested: bool = False) -> MixSource:
    first = memory(0, 44)
    if nested:
        first = MixSource([memory(0, 30), memory(100, 14, shuffle=True, seed=2)], [2, 1], seed=1)
    return MixSource([first, memory(500, 25, shuffle=True, seed=3), memory(900, 9)],
                     [0.5, 0.3, 0.2], seed=7)


def values(pipeline: Pipeline, epochs: int = 2) -> list[tuple[list, list]]:
    return [(np.asarray(b["id"]).tolist(), np.asarray(b["x"]).tolist())
            for _ in range(epochs) for b in pipeline]


@pytest.fixture
def group_short_passes(monkeypatch):
    monkeypatch.setattr(dispatch, "GROUP_MIN_BATCHES", 1)  # group passes of any length


@pytest.mark.parametrize("nested", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_group_of_mixture_batches_equals_one_by_one(monkeypatch, group_short_passes, nested) -> None:
    assert mixture(nested).reads_by_position()
    # 20 batches of 4 (the last of 2): one group, read as one run
    assert dispatch.group_size(4, 12, one_read=True) == 32
    grouped = values(Pipeline(mixture(nested), [], batch_size=4))
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)
    monkeypatch.setattr(dispatch, "ONE_READ_SCALE", 1)
    assert dispatch.group_size(4, 12, one_read=True) == 1
    single = values(Pipeline(mixture(nested), [], batch_size=4))
    assert grouped == single
    assert [len(ids) for ids, _ in grouped[:20]] == [4] * 19 + [2]
    assert grouped[:20] != grouped[20:]  # the second epoch goes on in each source


def test_resume_inside_a_group_of_mixture_batches(group_short_passes) -> None:
    pipeline = Pipeline(mixture(), [], batch_size=4)
    it = iter(pipeline)
    head = [np.asarray(next(it)["id"]).tolist() for _ in range(5)]  # 5 of a group of 20
    state = pipeline.get_state()
    rest = [np.asarray(b["id"]).tolist() for b in it]
    fresh = Pipeline(mixture(), [], batch_size=4)
    fresh.set_state(state)
    assert [np.asarray(b["id"]).tolist() for b in fresh] == rest
    assert len(head) + len(rest) == 20


class KeyedRows(IndexedSource):
    """Records that depend on the batch key: never read as one run."""

    def __len__(self) -> int:
        return 40

    def get_batch_at(self, start, size, key=None):
        noise = jax.random.randint(key, (), 0, 1000) if key is not None else 0
        return {"x": (jax.numpy.arange(size) + start) % 40 * 1000 + noise}


def test_a_source_reading_by_key_is_grouped_batch_by_batch(monkeypatch, group_short_passes) -> None:
    def run() -> list[list[int]]:
        pipeline = Pipeline(KeyedRows(StructuralConfig()), [], batch_size=4, rngs=nnx.Rngs(3))
        return [np.asarray(b["x"]).tolist() for b in pipeline]

    assert not KeyedRows(StructuralConfig()).reads_by_position()
    grouped = run()
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)
    monkeypatch.setattr(dispatch, "ONE_READ_SCALE", 1)
    assert grouped == run()
    assert len({x[0] % 1000 for x in grouped}) > 1  # each batch its own key


def test_memory_subclass_reading_otherwise_is_not_read_as_one_run() -> None:
    class Doubled(MemorySource):
        def get_batch_at(self, start, size, key=None):
            return {k: v * 2 for k, v in super().get_batch_at(start, size, key).items()}

    assert memory(0, 4).reads_by_position()
    assert not Doubled(MemorySourceConfig(), {"x": np.arange(4)}).reads_by_position()
