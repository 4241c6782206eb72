"""NumPy integers where a pipeline helper takes an int (``Rebatch``, ``scan``,
``StatsLogger``): taken as the same Python int, as ``batch_size`` is; anything that is not
an integer is still refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.metrics import StatsLogger
from datarax.pipeline import Pipeline, Rebatch
from datarax.sources import MemorySource, MemorySourceConfig
from source_reads import with_numpy_ints


def build(batch_size: int = 2) -> Pipeline:
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=batch_size, seed=0)


def xs(batches) -> list[list[int]]:
    return [np.asarray(b["x"]).tolist() for b in batches]


def test_rebatch_takeswith_numpy_ints():
    grouped = Rebatch(build(), group=np.int64(2))
    assert type(grouped.k) is int and xs(grouped) == [[0, 1, 2, 3], [4, 5]]
    assert xs(Rebatch(build(4), split=np.int32(2))) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ConfigError, match=r"Rebatch group= must be an int >= 1, got np.float64"):
        Rebatch(build(), group=np.float64(2))


def test_scan_takes_a_numpy_int_length():
    pipeline = build()
    out = pipeline.scan(lambda batch: batch["x"], np.int64(2))
    assert np.asarray(out).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ConfigError, match="Pipeline.scan length must be an int >= 1, got 2.0"):
        pipeline.scan(lambda batch: batch["x"], 2.0)


def test_stats_logger_takeswith_numpy_ints(tmp_path):
    pipeline = build()
    logger = StatsLogger(pipeline, every=np.int64(2), jsonl_path=tmp_path / "stats.jsonl")
    for _ in pipeline:
        logger.step(np.int32(1))
    logger.close()
    assert len((tmp_path / "stats.jsonl").read_text().splitlines()) == 1  # 3 steps, every 2
    with pytest.raises(ConfigError, match="StatsLogger every must be an int >= 1"):
        StatsLogger(pipeline, every=np.float32(2), jsonl_path=tmp_path / "other.jsonl")


def test_a_rebatch_state_holding_numpy_ints_restores_as_one_of_python_ints():
    def build_split():
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=2),
                              {"x": np.arange(10, dtype=np.int32)})
        return Rebatch(Pipeline(source=source, stages=[], batch_size=3, seed=0), split=3)

    first = build_split()
    iterator = iter(first)
    next(iterator)
    state = first.get_state()
    assert state["part"] == 1
    rest = xs(iterator)
    again = build_split()
    again.set_state(with_numpy_ints(state))
    assert xs(again) == rest
