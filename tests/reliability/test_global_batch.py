"""``datarax.sharding.global_batch`` in one process (the two-process run is test_multihost)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from datarax.core.dtypes import NarrowingError
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


def test_a_list_of_numbers_is_refused_and_ragged_records_stay_on_the_host():
    ragged = [np.zeros(1, np.float32), np.zeros(2, np.float32)]
    out = global_batch({"x": np.arange(2, dtype=np.int32), "r": ragged}, data_mesh())
    assert out["r"] is ragged
    with pytest.raises(ConfigError, match=r"field 'x' is a list of numbers \(1, 2\)"):
        global_batch({"x": [1, 2]}, data_mesh())


def test_global_batches_over_a_pipeline_epoch():
    pipeline = make_memory_pipeline(10, 4, shuffle=True, drop_remainder=True,
                                    shard_index=0, shard_count=1)
    shapes = [b["x"].shape for b in global_batches(pipeline, data_mesh("batch"), axis="batch")]
    assert shapes == [(4,), (4,)]


def test_data_mesh_needs_devices():
    with pytest.raises(ConfigError, match="data_mesh got no devices."):
        data_mesh(devices=[])


def test_64_bit_integers_that_fit_are_placed_as_int32_and_others_refused():
    # JAX would wrap 2**40 to 0 without a word while x64 is off
    out = global_batch({"x": np.asarray([0, 7], np.int64)}, data_mesh())
    assert out["x"].dtype == np.int32 and np.asarray(out["x"]).tolist() == [0, 7]
    with pytest.raises(NarrowingError, match=r"field 'x' is int64 and record 1 holds "
                                             r"1099511627776, outside the int32 range"):
        global_batch({"x": np.asarray([0, 2**40], np.int64)}, data_mesh())


def test_float64_is_refused_not_rounded():
    with pytest.raises(ConfigError, match=r"field 'x' is float64 but jax_enable_x64 is off.*"
                                          r"value.astype\(np.float32\)"):
        global_batch({"x": np.zeros(2)}, data_mesh())
