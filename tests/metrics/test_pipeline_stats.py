"""What ``pipeline.stats()`` reports for ``Pipeline.scan``: counts of the batches it
consumed, and its first call per length as start-up (``compile``), not per-batch work."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def test_scan_counts_batches_and_puts_its_first_call_under_compile():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(60, dtype=np.float32)})
    pipeline = Pipeline(source=source, stages=[], batch_size=5)

    def step(batch):
        return jnp.sum(batch["x"]) + 0.5  # a step of this test only: its program is new

    assert pipeline.scan(step, length=3).tolist() == [10.5, 35.5, 60.5]
    first = pipeline.stats()
    assert (first["batches"], first["records"]) == (3, 15)
    assert first["seconds"]["compile"] > 0 and first["seconds"]["step"] == 0.0
    assert pipeline.scan(step, length=3).tolist() == [85.5, 110.5, 135.5]
    second = pipeline.stats()
    assert (second["batches"], second["records"]) == (6, 30)
    assert second["seconds"]["compile"] == first["seconds"]["compile"]
    assert second["seconds"]["step"] > 0 and second["bottleneck"] == "step"
