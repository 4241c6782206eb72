"""Indexed sources under x64 with a user's strict JAX promotion settings: their traced
reads keep one integer dtype (int64 under x64), so batches are as without the strict
settings. The settings are set only in JAX's context managers here."""

from __future__ import annotations

import contextlib

import jax
import numpy as np
import pytest

from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig

from number_sources import numbers


@contextlib.contextmanager
def x64(strict: bool):
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.enable_x64(True))
        if strict:
            stack.enter_context(jax.numpy_dtype_promotion("strict"))
            stack.enter_context(jax.numpy_rank_promotion("raise"))
        yield


def epoch(shuffle: bool, strict: bool) -> list[list[int]]:
    with x64(strict):
        source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=3),
                              {"x": np.arange(10, dtype=np.int32)})
        return [np.asarray(b["x"]).tolist() for b in Pipeline(source, [], batch_size=4)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_memory_pipeline_under_x64_and_strict_promotion_serves_the_default_batches(shuffle):
    batches = epoch(shuffle, strict=True)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(sum(batches, [])) == list(range(10))
    assert batches == epoch(shuffle, strict=False)
    if not shuffle:
        assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_concatenation_of_a_shuffled_and_an_ordered_part_under_x64_and_strict_promotion():
    # the shuffled part numbers its records in int32, the ordered one in int64 (x64)
    def epoch(strict: bool) -> list[list[int]]:
        with x64(strict):
            source = ConcatSource([numbers(0, 5, shuffle=True, seed=7), numbers(100, 103)])
            return [np.asarray(b["x"]).tolist() for b in Pipeline(source, [], batch_size=3)]

    batches = epoch(strict=True)
    assert sorted(sum(batches, [])[:5]) == [0, 1, 2, 3, 4]
    assert sum(batches, [])[5:] == [100, 101, 102]
    assert batches == epoch(strict=False)
