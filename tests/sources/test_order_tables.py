"""A shuffled MemorySource's epoch order tables: the next epoch's is built ahead on a
thread while the current one is served, and is the same table as one built when asked."""

from __future__ import annotations

import os

import numpy as np
import pytest

import datarax.sources.order_tables as tables
from datarax.pipeline import Pipeline
from datarax.samplers.index_shuffle import index_shuffle_np
from datarax.sources import MemorySource, MemorySourceConfig


@pytest.mark.parametrize("length", [1, 7, 1_000, 70_000])
def test_a_table_built_ahead_is_the_one_built_when_asked(length: int) -> None:
    seed = 1234 + length
    tables.order_ahead(length, seed)
    ahead = tables.order_table(length, seed)
    expected = index_shuffle_np(np.arange(length), length - 1, seed).astype(np.int32)
    assert ahead.dtype == np.int32 and not ahead.flags.writeable
    assert np.array_equal(ahead, expected)
    assert sorted(ahead.tolist()) == list(range(length))


def test_a_failed_ahead_build_is_built_again_by_the_caller(monkeypatch) -> None:
    real = tables._build
    calls = []

    def flaky(length: int, seed: int) -> np.ndarray:
        calls.append(seed)
        if len(calls) == 1:
            raise MemoryError("no room on the thread")
        return real(length, seed)

    monkeypatch.setattr(tables, "_build", flaky)
    tables.order_ahead(500, 99_001)
    out = tables.order_table(500, 99_001)
    assert np.array_equal(out, real(500, 99_001)) and calls == [99_001, 99_001]


def test_a_pass_has_the_next_epochs_table_built_ahead_and_serves_the_same_batches() -> None:
    n, seed = 3_000, 17
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                       {"id": np.arange(n, dtype=np.int32)})
    pipeline = Pipeline(source=src, batch_size=1_000, prefetch=0)
    epochs = [np.concatenate([np.asarray(b["id"]) for b in pipeline]) for _ in range(3)]
    # epoch 2's pass started building epoch 3's table, which nothing asked for yet
    assert (os.getpid(), n, seed + 3) in tables._TABLES
    for epoch, ids in enumerate(epochs):
        want = index_shuffle_np(np.arange(n), n - 1, seed + epoch)
        assert np.array_equal(ids, want), epoch
