"""A cached compiled step keeps no data set alive: the graph definition it is cached
under is split from a twin of the source that holds only the records' layout."""

from __future__ import annotations

import gc
import weakref

import jax
import numpy as np
import pytest

from datarax.core.step_cache import split_for_step
from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.pipeline.steps import indexed_step
from datarax.sources import MemorySource, MemorySourceConfig


def _data(i: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(64, dtype=np.float32) + 1000 * i, "label": np.arange(64) % 4}


def _stages(kind: str, i: int) -> list:
    if kind == "element":  # a new lambda each run: a new step each run
        return [ElementOperator(fn=lambda el, key, i=i: el.update_data({"y": el.data["x"] + i}))]
    return [FilterOperator(predicate=lambda el, i=i: el.data["label"] < 1 + i % 3)]


@pytest.mark.parametrize("kind", ["element", "filter"])
def test_new_sources_and_lambdas_leave_no_data_alive(kind: str) -> None:
    sources, columns, firsts = [], [], []
    for i in range(6):
        src = MemorySource(MemorySourceConfig(shuffle=True, seed=i), _data(i))
        pipeline = Pipeline(src, stages=_stages(kind, i), batch_size=8)
        firsts.append(np.asarray(next(iter(pipeline))["x"]))
        sources.append(weakref.ref(src))
        columns.extend(weakref.ref(leaf) for leaf in jax.tree.leaves(src.step_inputs()))
        del src, pipeline
    gc.collect()
    assert [r() is None for r in sources] == [True] * 6
    assert [r() is None for r in columns] == [True] * len(columns)
    for i, first in enumerate(firsts):  # each batch read its own source's records
        assert first.shape[0] > 0 and np.all((first >= 1000 * i) & (first < 1000 * i + 64))


def test_equal_shapes_find_the_same_step_with_their_own_records() -> None:
    def double(el, key):
        return el.update_data({"x": el.data["x"] * 2})

    stage = ElementOperator(fn=double)
    steps, batches = [], []
    for i in range(2):
        src = MemorySource(MemorySourceConfig(), _data(i))
        graphdef, _ = split_for_step((src, [stage]))
        steps.append(indexed_step(graphdef, 8))
        batches.append(np.asarray(next(iter(Pipeline(src, stages=[stage], batch_size=8)))["x"]))
    assert steps[0] is steps[1]
    np.testing.assert_array_equal(batches[0], np.arange(8, dtype=np.float32) * 2)
    np.testing.assert_array_equal(batches[1], (np.arange(8, dtype=np.float32) + 1000) * 2)


def test_text_fields_keep_working_after_the_first_source_is_gone() -> None:
    for i in range(2):
        src = MemorySource(MemorySourceConfig(), {"id": np.arange(4) + 10 * i,
                                                  "word": [f"w{i}{k}" for k in range(4)]})
        batch = next(iter(Pipeline(src, batch_size=2)))
        assert batch["id"].tolist() == [10 * i, 10 * i + 1]
        assert batch["word"] == [f"w{i}0", f"w{i}1"]
        del src
        gc.collect()


def test_a_source_wrapping_a_memory_source_reads_its_records() -> None:
    """A user's source that holds a MemorySource but passes no step inputs: the inner
    records are traced as constants (its twin must keep them), not refused."""
    from datarax.core.config import StructuralConfig
    from datarax.core.indexed import IndexedSource

    class Tens(IndexedSource):
        def __init__(self, inner: MemorySource) -> None:
            super().__init__(StructuralConfig())
            self.inner = inner

        def __len__(self) -> int:
            return len(self.inner)

        def get_batch_at(self, start, size, key=None):
            return {"x": self.inner.get_batch_at(start, size, key)["x"] * 10}

    for i in range(2):
        src = Tens(MemorySource(MemorySourceConfig(), _data(i)))
        batch = next(iter(Pipeline(src, batch_size=4)))
        np.testing.assert_array_equal(np.asarray(batch["x"]),
                                      (np.arange(4, dtype=np.float32) + 1000 * i) * 10)
