"""A MixSource pipeline under x64 with a user's strict JAX promotion settings: its traced
schedule keeps one integer dtype (int64 under x64), so batches are as without the strict
settings. The settings are set only in JAX's context managers here."""

from __future__ import annotations

import contextlib

import jax
import numpy as np

from datarax.mixing import MixSource
from datarax.pipeline import Pipeline

from number_sources import numbers


def epoch(strict: bool) -> list[list[int]]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.enable_x64(True))
        if strict:
            stack.enter_context(jax.numpy_dtype_promotion("strict"))
            stack.enter_context(jax.numpy_rank_promotion("raise"))
        mix = MixSource([numbers(0, 6, field="id"), numbers(10, 13, field="id")],
                        weights=[2, 1], seed=0)
        return [np.asarray(b["id"]).tolist() for b in Pipeline(mix, [], batch_size=4)]


def test_mixture_under_x64_and_strict_promotion_serves_the_default_batches():
    batches = epoch(strict=True)
    assert [len(b) for b in batches] == [4, 4, 1]
    assert sorted(sum(batches, [])) == [0, 1, 2, 3, 4, 5, 10, 11, 12]
    assert batches == epoch(strict=False)
