"""A shuffled MemorySource read through a Pipeline takes each epoch's order from a table
built on the host (``MemorySource.epoch_step_inputs``) instead of running the Feistel
cipher in the compiled step: the same batches, bit for bit, as without the table."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

import datarax.sources.memory as memory
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def source(n: int, seed: int = 3) -> MemorySource:
    rows = np.random.default_rng(0).integers(0, 256, (n, 4), dtype=np.uint8)
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"id": np.arange(n, dtype=np.int32), "row": rows})


def noisy() -> ElementOperator:  # a keyed stage: its draws follow the records' indices
    return ElementOperator(
        ElementOperatorConfig(stochastic=True),
        fn=lambda e, key: e.update_data({"noise": jax.random.uniform(key, (2,))}))


def batches(pipeline: Pipeline, epochs: int = 2) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in b.items()} for _ in range(epochs) for b in pipeline]


def two_epochs(monkeypatch, table: bool, **kwargs) -> list[dict[str, np.ndarray]]:
    monkeypatch.setattr(memory, "SHUFFLE_TABLE_MAX", 1 << 17 if table else 0)
    shard = kwargs.pop("shard", None)
    src = source(kwargs.pop("n"))
    if shard is not None:
        src.set_shard(*shard)
    return batches(Pipeline(source=src, **kwargs))


def same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("case", [
    {"n": 1_000, "batch_size": 64},  # a short last batch; under 2**14 records
    {"n": 20_000, "batch_size": 256},  # batches read in groups, the last group cut
    {"n": 999, "batch_size": 32, "stages": "noisy"},  # a keyed stage per record
    {"n": 1_001, "batch_size": 50, "shard": (1, 3)},  # a shard's block of positions
])
def test_every_batch_of_two_epochs_is_the_same_with_and_without_the_table(
        monkeypatch, case) -> None:
    def kwargs() -> dict:
        out = dict(case)
        if out.get("stages") == "noisy":
            out.update(stages=[noisy()], rngs=nnx.Rngs(5))
        return out

    with_table = two_epochs(monkeypatch, True, **kwargs())
    without = two_epochs(monkeypatch, False, **kwargs())
    assert same(with_table, without)
    ids = np.concatenate([b["id"] for b in with_table])
    per_epoch = len(ids) // 2
    assert sorted(ids[:per_epoch].tolist()) == sorted(ids[per_epoch:].tolist())
    assert ids[:per_epoch].tolist() != ids[per_epoch:].tolist()  # a new order each epoch


def test_a_restore_in_the_second_epoch_continues_with_that_epochs_order(monkeypatch) -> None:
    monkeypatch.setattr(memory, "SHUFFLE_TABLE_MAX", 0)
    reference = batches(Pipeline(source=source(700), batch_size=64))
    monkeypatch.setattr(memory, "SHUFFLE_TABLE_MAX", 1 << 17)
    first = Pipeline(source=source(700), batch_size=64)
    list(first)  # epoch 0
    it = iter(first)
    next(it), next(it)
    state = first.get_state()
    resumed = Pipeline(source=source(700), batch_size=64)
    resumed.set_state(state)
    assert same(batches(resumed, 1), reference[len(reference) // 2 + 2:])


def test_the_table_is_the_order_the_source_serves() -> None:
    src = source(5_000)
    columns, order = src.epoch_step_inputs(2)
    served = np.asarray(src.record_indices_at(2 * 5_000, 5_000))
    assert np.asarray(order["order"]).tolist() == served.tolist()
    assert int(order["base"]) == 10_000


def test_sources_without_a_shuffle_or_too_large_read_without_a_table(monkeypatch) -> None:
    plain = MemorySource(MemorySourceConfig(), {"x": np.arange(10)})
    assert not isinstance(plain.epoch_step_inputs(0), tuple)
    monkeypatch.setattr(memory, "SHUFFLE_TABLE_MAX", 100)
    assert not isinstance(source(101).epoch_step_inputs(0), tuple)
    assert isinstance(source(100).epoch_step_inputs(0), tuple)
