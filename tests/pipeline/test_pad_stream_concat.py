"""pad_remainder=True: Pipeline.scan (no "valid" field) refused; a flat-mapped stream and
a concatenation padded on one process count each record once."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, FlatMapSource, MemorySource, MemorySourceConfig


def memory(lo, hi, seed=0):
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"x": np.arange(lo, hi, dtype=np.int32)})


def test_scan_of_a_padded_pipeline_is_refused_naming_the_valid_field():
    p = Pipeline(memory(0, 8), batch_size=4, pad_remainder=True)  # the epoch divides too
    with pytest.raises(ConfigError, match="without the 'valid' field pad_remainder=True adds"):
        p.scan(lambda batch: batch["valid"].sum(), length=2)
    assert (p.epoch, p.position) == (0, 0)
    assert [np.asarray(p.step()["valid"]).tolist() for _ in range(2)] == [[True] * 4] * 2


def valid_values(batches):
    return sorted(x for b in batches for x, v in zip(np.asarray(b["x"]).tolist(),
                                                      np.asarray(b["valid"]).tolist()) if v)


def test_padded_stream_and_concatenation_count_each_record_once():
    def copies(record):  # x gives x % 3 copies of itself
        return [{"x": record["x"]}] * (int(record["x"]) % 3)

    stream = Pipeline(FlatMapSource(memory(0, 10), copies, max_outputs=2), batch_size=4,
                      pad_remainder=True)
    batches = list(stream)
    assert {np.asarray(b["x"]).shape for b in batches} == {(4,)}
    assert valid_values(batches) == sorted(x for x in range(10) for _ in range(x % 3))
    both = Pipeline(ConcatSource([memory(0, 5, 1), memory(100, 103, 2)]), batch_size=3,
                    pad_remainder=True)
    assert len(both) == 3
    assert valid_values(both) == [0, 1, 2, 3, 4, 100, 101, 102]


def test_len_of_a_flat_mapped_source_says_why_it_is_unknown():
    source = FlatMapSource(memory(0, 3), lambda record: [record], max_outputs=1)
    with pytest.raises(TypeError, match="FlatMapSource has no length: fn returns 0 .. "
                                        "max_outputs records"):
        len(source)
    assert source.epoch_size() is None and bool(source)
    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule

    class Stream(DataSourceModule):
        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.int32)}

        def get_batch(self, batch_size):
            return None

    assert bool(ConcatSource([memory(0, 2), Stream(StructuralConfig())]))
