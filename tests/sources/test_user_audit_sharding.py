"""Sharding a small dataset over more processes than it has records.

Equal shares are ``len // shard_count`` records: a 5-record evaluation split over 8
processes would give every process nothing, dropping the whole split without a word.
The Pipeline refuses that when it is built and says what to do; ``pad_remainder=True``
still serves every record once.
"""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def make(index: int, count: int, n: int = 5, **options) -> Pipeline:
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=2, shard_index=index,
                    shard_count=count, **options)


def test_more_processes_than_records_is_refused_naming_the_counts_and_the_fix():
    with pytest.raises(ConfigError, match=r"shard_count=8 over MemorySource's 5 records: .* = 0 "
                                          r"records.*pad_remainder=True"):
        make(3, 8)


def test_padded_shares_still_serve_every_record_once():
    served = []
    for index in range(8):
        for batch in make(index, 8, pad_remainder=True):
            served += np.asarray(batch["x"])[np.asarray(batch["valid"])].tolist()
    assert sorted(served) == list(range(5))


def test_as_many_processes_as_records_serve_one_each():
    assert [[b["x"].tolist() for b in make(i, 5)] for i in range(5)] == [[[i]] for i in range(5)]
