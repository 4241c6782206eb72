"""Pipeline(pad_remainder=True): one shape for every batch, a "valid" field, each record
counted once — indexed and host sources, with a filter, on every shard."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def memory(n):
    return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})


def test_last_batch_padded_with_valid_rows_counted_once(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(10, dtype=np.int32))
    for source, field in ((memory(10), "x"),
                          (NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"))), "data")):
        p = Pipeline(source, batch_size=4, pad_remainder=True)
        batches = list(p)
        assert [b[field].shape for b in batches] == [(4,)] * 3
        assert np.asarray(batches[-1]["valid"]).tolist() == [True, True, False, False]
        counted = np.concatenate([np.asarray(b[field])[np.asarray(b["valid"])] for b in batches])
        assert counted.tolist() == list(range(10))
        assert p.element_spec()["valid"].dtype == np.bool_


def test_every_shard_gets_the_same_number_of_full_batches():
    shapes = []
    for i in range(3):
        p = Pipeline(memory(10), batch_size=2, pad_remainder=True, shard_index=i, shard_count=3)
        shapes.append([np.asarray(b["x"]).shape for b in p])
    assert shapes[0] == shapes[1] == shapes[2] == [(2,), (2,)]


def test_with_a_filter_and_refused_combinations():
    keep = FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)
    p = Pipeline(memory(10), stages=[keep], batch_size=4, pad_remainder=True)
    last = list(p)[-1]
    assert np.asarray(last["x"]).tolist() == [8, 8, 8, 8]
    assert np.asarray(last["valid"]).tolist() == [True, False, False, False]
    with pytest.raises(ConfigError, match="drop_remainder"):
        Pipeline(memory(10), batch_size=4, pad_remainder=True, drop_remainder=True)
