"""``Pipeline.scan`` / ``step`` with ``sharding=`` on 8 CPU devices."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from datarax.core.errors import ConfigError
from devices_sources import host, make_pipeline


def echo(batch):
    return batch


def test_scan_with_sharding_serves_the_loop_batches_split_over_the_mesh():
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    want = [host(b) for b in make_pipeline("indexed", 64, 16, shuffle=True, stochastic=True)]
    pipeline = make_pipeline("indexed", 64, 16, shuffle=True, stochastic=True,
                             sharding=(mesh, P("data")))
    out = pipeline.scan(echo, length=4)
    for i, batch in enumerate(want):
        for name, value in batch.items():
            np.testing.assert_array_equal(np.asarray(out[name][i]), value, err_msg=name)
    # the batch axis (axis 1 of the stacked outputs) stays split over the mesh
    assert out["x"].sharding.is_equivalent_to(NamedSharding(mesh, P(None, "data")), 2)


def test_step_with_sharding_places_each_batch():
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    pipeline = make_pipeline("indexed", 24, 8, sharding=NamedSharding(mesh, P("data")))
    batches = [pipeline.step() for _ in range(4)]
    assert all(b["y"].sharding == NamedSharding(mesh, P("data")) for b in batches)
    assert [np.asarray(b["x"]).tolist() for b in batches][3] == (np.arange(8) * 2).tolist()


def test_scan_with_sharding_over_eight_devices_compiles_once():
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    traced = []

    def counted(batch):
        traced.append(1)
        return batch["x"]

    pipeline = make_pipeline("indexed", 64, 16, sharding=(mesh, P("data")))
    chunks = [np.asarray(pipeline.scan(counted, length=2)) for _ in range(3)]
    assert len(traced) == 1
    assert np.concatenate(chunks)[:, 0].tolist() == [0, 32, 64, 96, 0, 32]


def test_scan_over_a_mesh_of_explicit_axes_splits_the_batch_as_iteration_does():
    from jax.sharding import AxisType

    want = [host(b) for b in make_pipeline("indexed", 32, 16, shuffle=True)]
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Auto))
    pipeline = make_pipeline("indexed", 32, 16, shuffle=True, sharding=(mesh, P("data", "model")))
    out = pipeline.scan(echo, length=2)
    for i, batch in enumerate(want):
        for name, value in batch.items():
            np.testing.assert_array_equal(np.asarray(out[name][i]), value, err_msg=name)
    assert {s.data.shape for s in out["y"].addressable_shards} == {(2, 4, 2)}  # steps, rows, cols
    # one dimension over an Explicit and an Auto axis: iteration places it, scan refuses
    mixed = make_pipeline("indexed", 32, 16, sharding=(mesh, P(("data", "model"))))
    with pytest.raises(ConfigError, match=r"splits one dimension over mesh axes \['data', "
                       r"'model'\] of different types"):
        mixed.scan(echo, length=2)
    assert (mixed.epoch, mixed.position) == (0, 0)
    assert next(iter(mixed))["x"].sharding.spec == P(("data", "model"))
