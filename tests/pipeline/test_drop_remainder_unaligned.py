"""drop_remainder=True over a pass that begins between batch boundaries (a source
another loop read with another batch size, or a seek): full batches only, on every
kind of source, and len() of the iterator says how many."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def source(kind, n, tmp_path):
    if kind == "memory":
        return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})
    np.save(tmp_path / "x.npy", np.arange(n, dtype=np.int32))
    return NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"), field="x"))


@pytest.mark.parametrize("kind", ["memory", "npy"])
def test_a_pass_begun_between_batch_boundaries_serves_full_batches(kind, tmp_path):
    shared = source(kind, 12, tmp_path)
    for _ in Pipeline(shared, batch_size=3, prefetch=0):  # another loop read 3 records
        break
    pipeline = Pipeline(shared, batch_size=4, drop_remainder=True)
    iterator = iter(pipeline)
    assert len(iterator) == 2
    # records 3 .. 10 in two full batches; record 11 alone is the short batch, dropped
    assert [b["x"].tolist() for b in iterator] == [[3, 4, 5, 6], [7, 8, 9, 10]]
    shared.seek(0, 1)  # of 12 records, 8 past an aligned epoch's last full batch
    iterator = iter(pipeline)
    assert len(iterator) == 2
    assert [b["x"].tolist() for b in iterator] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    shared.seek(1, 1)
    assert [b["x"].tolist() for b in pipeline.skip(1)] == [[5, 6, 7, 8]]
