"""``datarax.sharding.global_batch`` in one process (the two-process run is test_multihost)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.sharding import data_mesh, global_batch, global_batches

from reliability_sources import make_memory_pipeline


def test_global_batch_shards_the_batch_axis_over_the_mesh():
    mesh = data_mesh()
    local = {"x": np.arange(6, dtype=np.int32), "y": np.ones((6, 2), np.float32)}
    out = global_batch(local, mesh)
    assert out["x"].shape == (6 * jax.process_count(),)
    assert tuple(out["y"].sharding.spec) == ("data",)
    np.testing.assert_array_equal(np.asarray(out["y"]), local["y"])


def test_text_fields_stay_on_the_host():
    out = global_batch({"x": np.arange(2, dtype=np.int32), "t": ["a", "b"]}, data_mesh())
    assert out["t"] == ["a", "b"]


def test_global_batches_over_a_pipeline_epoch():
    pipeline = make_memory_pipeline(10, 4, shuffle=True, drop_remainder=True,
                                    shard_index=0, shard_count=1)
    shapes = [b["x"].shape for b in global_batches(pipeline, data_mesh("batch"), axis="batch")]
    assert shapes == [(4,), (4,)]


def test_data_mesh_needs_devices():
    with pytest.raises(ConfigError, match="data_mesh got no devices."):
        data_mesh(devices=[])
