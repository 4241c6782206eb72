"""``stages_on="host"`` on 8 CPU devices, where the default device (``jax.default_device``
set to device 5) is not the device stages run on (the first CPU device, 0): the
compiled step's outputs come from device 0, the batches a loop gets lie on device 5
(or the ``sharding=`` mesh), with the values of ``stages_on="device"``."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from datarax.operators import FilterOperator
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.filtered import FilteredDispatch
from devices_sources import host, make_pipeline

KINDS = ["indexed", "host", "stream"]


def stage_device() -> Any:
    return jax.local_devices(backend="cpu")[0]


def target() -> Any:
    return jax.devices()[5]


def build(kind: str, stages_on: str, **kwargs: Any) -> Any:
    return make_pipeline(kind, 21, 4, stochastic=kind != "stream", shuffle=kind != "stream",
                         stages_on=stages_on, **kwargs)


def devices_of(batch: dict[str, Any]) -> set[Any]:
    return {d for v in batch.values() for d in v.devices()}


@pytest.mark.parametrize("kind", KINDS)
def test_batches_on_the_default_device_values_unchanged(kind):
    assert stage_device() != target()
    with jax.default_device(target()):  # columns, and batches, on device 5
        device, on_host = build(kind, "device"), build(kind, "host")
        got, want = [], []
        for _ in range(2):
            got += list(on_host)
            want += list(device)
    assert len(got) == len(want) == 12
    assert all(devices_of(b) == {target()} for b in got + want)
    for a, b in zip(got, want):
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def test_indexed_step_runs_on_the_cpu_device():
    with jax.default_device(target()):
        on_host = build("indexed", "host", check_finite=True)  # check_finite: unplaced
        device = build("indexed", "device", check_finite=True)
        columns = on_host.source.step_inputs()
        assert {d for v in jax.tree.leaves(columns) for d in v.devices()} == {target()}
        step = IndexedDispatch(on_host._context(), 0)
        _, out, _ = step.dispatch_one()
        assert devices_of(out) == {stage_device()}
        assert {d for v in jax.tree.leaves(step.inputs) for d in v.devices()} == {stage_device()}
        _, out, _ = IndexedDispatch(device._context(), 0).dispatch_one()
        assert devices_of(out) == {target()}
        # checked for NaN on the host, then moved: the loop still gets device 5's batches
        assert all(devices_of(b) == {target()} for b in on_host)


def test_filtered_step_runs_on_the_cpu_device():
    def keep(el: Any) -> Any:
        return el.data["x"] % 3 != 0

    def filtered(stages_on: str, **kwargs: Any) -> Any:
        pipeline = build("indexed", stages_on, **kwargs)
        return type(pipeline)(source=pipeline.source,
                              stages=[FilterOperator(predicate=keep), *pipeline.stages],
                              batch_size=4, seed=0, stages_on=stages_on, **kwargs)

    with jax.default_device(target()):
        probe = filtered("host", check_finite=True)
        items = FilteredDispatch(probe._context(), 0, 0).dispatch_some()
        assert items and devices_of(items[0][1]) == {stage_device()}
        got, want = list(filtered("host")), list(filtered("device"))
    assert all(devices_of(b) == {target()} for b in got)
    assert [host(b)["x"].tolist() for b in got] == [host(b)["x"].tolist() for b in want]


@pytest.mark.parametrize("kind", KINDS)
def test_host_stages_then_the_mesh(kind):
    mesh = Mesh(np.asarray(jax.devices()[4:8]), ("data",))
    got = list(build(kind, "host", sharding=(mesh, P("data")), drop_remainder=True))
    want = list(build(kind, "device", sharding=(mesh, P("data")), drop_remainder=True))
    assert len(got) == 5
    for a, b in zip(got, want):
        for k in a:
            assert a[k].sharding.is_equivalent_to(b[k].sharding, a[k].ndim)
            assert {d.id for d in a[k].devices()} == {4, 5, 6, 7}
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_host_stages_under_a_loop_mesh(kind):
    # jax.set_mesh around the loop names the accelerators; the host step runs on the CPU
    # without it (was: JAX refused the CPU arguments against the context mesh's devices)
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    want = [host(b) for b in build(kind, "device", drop_remainder=True)]
    with jax.set_mesh(mesh):
        plain = list(build(kind, "host", drop_remainder=True))
        split = list(build(kind, "host", drop_remainder=True, sharding=(mesh, P("data"))))
    assert len(plain) == len(split) == len(want) == 5
    for a, b, w in zip(plain, split, want):
        assert devices_of(a) == {jax.devices()[0]}  # the default device: no sharding=
        assert b["x"].sharding == NamedSharding(mesh, P("data"))
        for k in w:
            np.testing.assert_array_equal(np.asarray(a[k]), w[k], err_msg=k)
            np.testing.assert_array_equal(np.asarray(b[k]), w[k], err_msg=k)
