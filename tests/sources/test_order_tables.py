"""A shuffled MemorySource's epoch order tables: the next epoch's is built and placed on
the device ahead, on one long-lived thread, while the current one is served, and is the
same table as one built when asked."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import datarax.sources.order_tables as tables
from datarax.pipeline import Pipeline
from datarax.samplers.index_shuffle import index_shuffle_np
from datarax.sources import MemorySource, MemorySourceConfig


@pytest.mark.parametrize("length", [1, 7, 1_000, 70_000])
def test_a_table_is_the_ciphers_order(length: int) -> None:
    seed = 1234 + length
    ahead = tables.order_table(length, seed)
    expected = index_shuffle_np(np.arange(length), length - 1, seed).astype(np.int32)
    assert ahead.dtype == np.int32 and not ahead.flags.writeable
    assert np.array_equal(ahead, expected)
    assert sorted(ahead.tolist()) == list(range(length))


def test_a_pass_has_the_next_epochs_table_built_ahead_and_serves_the_same_batches() -> None:
    n, seed = 3_000, 17
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                       {"id": np.arange(n, dtype=np.int32)})
    pipeline = Pipeline(source=src, batch_size=1_000, prefetch=0)
    epochs = [np.concatenate([np.asarray(b["id"]) for b in pipeline]) for _ in range(3)]
    # epoch 2's pass started making epoch 3's order, which nothing asked for yet
    ahead = tables.placed_order(n, seed + 3, np.int32(3 * n))
    assert ahead is tables.placed_order(n, seed + 3, np.int32(3 * n))  # made once, ahead
    assert np.array_equal(np.asarray(ahead["order"]), index_shuffle_np(np.arange(n), n - 1, seed + 3))
    for epoch, ids in enumerate(epochs):
        want = index_shuffle_np(np.arange(n), n - 1, seed + epoch)
        assert np.array_equal(ids, want), epoch


def test_an_order_placed_ahead_is_the_one_placed_when_asked() -> None:
    tables.placed_order_ahead(1_000, 5_150, np.int32(7_000))
    ahead = tables.placed_order(1_000, 5_150, np.int32(7_000))
    now = jax.device_put({"base": np.int32(7_000), "order": tables._build(1_000, 5_150)})
    assert {k: (v.dtype, v.shape, v.sharding) for k, v in ahead.items()} == {
        k: (v.dtype, v.shape, v.sharding) for k, v in now.items()}
    assert int(ahead["base"]) == 7_000
    assert np.array_equal(np.asarray(ahead["order"]), np.asarray(now["order"]))


@pytest.mark.parametrize("length", [1, 2, 600, 70_001])  # small tables, cycle walking
def test_an_order_the_device_computes_ahead_is_the_one_built_on_the_host(monkeypatch, length) -> None:
    monkeypatch.setattr(tables, "HOST_BUILT_ON", frozenset())  # as off the CPU
    base = np.int32(2 * length)  # epoch 2: the first the device computes
    for seed in (5_160, 2**32 - 1):
        tables.placed_order_ahead(length, seed, base)
        ahead = tables.placed_order(length, seed, base)
        now = jax.device_put({"base": base, "order": tables._build(length, seed)})
        assert {k: (v.dtype, v.shape, v.sharding) for k, v in ahead.items()} == {
            k: (v.dtype, v.shape, v.sharding) for k, v in now.items()}
        assert int(ahead["base"]) == 2 * length
        assert np.array_equal(np.asarray(ahead["order"]), np.asarray(now["order"])), seed


def test_an_order_asked_under_other_settings_is_placed_for_them() -> None:
    tables.placed_order_ahead(600, 5_151, np.int32(0))  # made for the default device
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        placed = tables.placed_order(600, 5_151, np.int32(0))
    assert placed["order"].devices() == {cpu}
    assert np.array_equal(np.asarray(placed["order"]), tables._build(600, 5_151))


def test_a_failed_ahead_placement_is_placed_again_by_the_caller(monkeypatch) -> None:
    def refuse(*args):
        raise MemoryError("no room on the device")

    monkeypatch.setattr(tables, "_place", refuse)
    tables.placed_order_ahead(400, 5_152, np.int32(400))
    placed = tables.placed_order(400, 5_152, np.int32(400))
    assert int(placed["base"]) == 400
    assert np.array_equal(np.asarray(placed["order"]), tables._build(400, 5_152))


def test_epochs_ahead_share_one_worker_thread() -> None:
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=23),
                       {"id": np.arange(2_000, dtype=np.int32)})
    pipeline = Pipeline(source=src, batch_size=1_000, prefetch=0)
    for _ in range(5):
        for _ in pipeline:
            pass
        workers = [t for t in threading.enumerate() if t.name.startswith("datarax-order-ahead")]
        assert len(workers) == 1, workers
