"""``Pipeline(..., sharding=...)`` on 8 CPU devices: values, shardings, errors, state."""

from __future__ import annotations

import copy
import time

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from datarax.core.errors import ConfigError
from devices_sources import host, make_pipeline

KINDS = ["indexed", "host", "stream"]


def mesh_1d() -> Mesh:
    return Mesh(np.asarray(jax.devices()), ("data",))


def mesh_2d() -> Mesh:
    return Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))


def rows_per_device(array: jax.Array) -> dict[int, list[int]]:
    """Device id -> the batch rows (first-column values) that device holds."""
    out = {}
    for shard in array.addressable_shards:
        data = np.asarray(shard.data)
        out[shard.device.id] = (data if data.ndim == 1 else data[:, 0]).tolist()
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_batches_are_global_arrays_split_over_the_data_axis(kind):
    mesh = mesh_1d()
    sharding = NamedSharding(mesh, P("data"))
    plain = [host(b) for b in make_pipeline(kind, 40, 16, drop_remainder=True, shuffle=kind != "stream")]
    placed = list(make_pipeline(kind, 40, 16, drop_remainder=True, shuffle=kind != "stream",
                                sharding=sharding))
    assert len(placed) == len(plain) == 2
    for want, got in zip(plain, placed):
        assert set(got) == set(want)
        for name, value in got.items():
            assert isinstance(value, jax.Array)
            assert value.sharding == NamedSharding(mesh, P("data")), name
            np.testing.assert_array_equal(np.asarray(value), want[name])
        first = "x" if "x" in got else "id"
        column = want[first].tolist()
        # device i of the mesh holds rows 2i, 2i+1 of the batch
        by_device = rows_per_device(got[first])
        for i, device in enumerate(mesh.devices.flat):
            assert by_device[device.id] == column[2 * i:2 * i + 2]


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_two_dimensional_mesh_splits_batch_over_one_axis_and_features_over_the_other(kind):
    mesh = mesh_2d()
    pipeline = make_pipeline(kind, 16, 8, stochastic=True, sharding=(mesh, P("data", "model")))
    plain = [host(b) for b in make_pipeline(kind, 16, 8, stochastic=True)]
    placed = list(pipeline)
    assert len(placed) == 2
    for want, got in zip(plain, placed):
        # y: (8, 4) split 4 ways on rows and 2 ways on columns; x: (8,) rows only.
        assert got["y"].sharding == NamedSharding(mesh, P("data", "model"))
        assert got["x"].sharding == NamedSharding(mesh, P("data"))
        assert got["noise"].sharding == NamedSharding(mesh, P("data", "model"))
        for name in want:
            np.testing.assert_array_equal(np.asarray(got[name]), want[name])
        shapes = {s.data.shape for s in got["y"].addressable_shards}
        assert shapes == {(2, 2)}
        x_rows = rows_per_device(got["x"])
        for (r, c), device in np.ndenumerate(mesh.devices):
            assert x_rows[device.id] == want["x"][2 * r:2 * r + 2].tolist()


def test_batch_split_over_both_mesh_axes():
    mesh = mesh_2d()
    got = next(iter(make_pipeline("indexed", 16, 16, sharding=(mesh, P(("data", "model"))))))
    assert got["x"].sharding.spec == P(("data", "model"))
    assert sorted(len(v) for v in rows_per_device(got["x"]).values()) == [2] * 8
    np.testing.assert_array_equal(np.asarray(got["x"]), np.arange(16) * 2)  # scale_first


def test_prefetched_batches_wait_already_placed():
    sharding = NamedSharding(mesh_1d(), P("data"))
    iterator = iter(make_pipeline("indexed", 64, 8, prefetch=3, sharding=sharding))
    first = next(iterator)
    deadline = time.monotonic() + 60  # the dispatch thread fills its three places
    while len(iterator._driver.ahead._items) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    queued = [batch for _, batch, _ in list(iterator._driver.ahead._items)]
    assert len(queued) == 3
    assert all(b["x"].sharding == sharding for b in queued)
    np.testing.assert_array_equal(np.asarray(first["x"]), np.arange(8) * 2)
    np.testing.assert_array_equal(np.asarray(queued[2]["x"]), np.arange(24, 32) * 2)


def test_batch_size_that_does_not_split_is_refused():
    with pytest.raises(ConfigError, match=r"batch_size=12 does not split over this process's 8 "
                       r"devices on mesh axes \['data'\]; use a batch size divisible by 8\."):
        make_pipeline("indexed", 40, 12, sharding=(mesh_1d(), P("data")))


def test_short_last_batch_that_does_not_split_is_refused():
    with pytest.raises(ConfigError, match=r"last batch of each epoch holds 4 records \(20 in "
                       r"this shard\), which do not split over this process's 8 devices; "
                       r"set drop_remainder=True\."):
        make_pipeline("host", 20, 8, sharding=(mesh_1d(), P("data")))
    # a last batch that divides is fine: 24 = 16 + 8
    sizes = [b["x"].shape[0] for b in make_pipeline("host", 24, 16, sharding=(mesh_1d(), P("data")))]
    assert sizes == [16, 8]


def test_a_stream_short_last_batch_is_refused_when_it_comes():
    pipeline = make_pipeline("stream", 20, 8, sharding=(mesh_1d(), P("data")))
    iterator = iter(pipeline)
    next(iterator), next(iterator)
    with pytest.raises(ConfigError, match=r"batch at record 16 of epoch 0, field 'id': 4 records do not "
                       r"split over this process's 8 devices"):
        next(iterator)


@pytest.mark.parametrize("bad, message", [
    ("data", "must be a jax.sharding.NamedSharding or a (Mesh, PartitionSpec) pair, got str."),
    ((None, P("data")), "needs a jax.sharding.Mesh and a PartitionSpec, got (NoneType, PartitionSpec)."),
    ((mesh_1d(), P()), "does not split the batch axis: its first entry must name a mesh axis"),
    ((mesh_1d(), P("batch")), "names axis 'batch'; the mesh has axes ['data']."),
    ((mesh_2d(), P(("data", "model"), "model")), "names mesh axis 'model' twice; a mesh axis "
     "splits one dimension at most (the batch axis is the first entry's)"),
    ((mesh_2d(), P(None, "data")), "does not split the batch axis: its first entry"),
    (jax.sharding.SingleDeviceSharding(jax.devices()[1]), "got SingleDeviceSharding. To put "
     "every batch on one device, leave sharding= out and iterate under `with "
     "jax.default_device(device):`"),
    (mesh_1d(), "got Mesh. Name the mesh axis the batch is split over: (mesh, "
     "PartitionSpec('data'))."),
])
def test_bad_sharding_is_refused(bad, message):
    with pytest.raises(ConfigError) as err:
        make_pipeline("indexed", 16, 8, sharding=bad)
    assert message in str(err.value)


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_state_restores_onto_another_mesh(kind):
    saver = make_pipeline(kind, 48, 8, shuffle=True, sharding=(mesh_1d(), P("data")))
    iterator = iter(saver)
    seen = [host(next(iterator)) for _ in range(2)]
    state = iterator.get_state()
    assert "sharding" not in str(state)
    rest = [host(b) for b in iterator]
    other = Mesh(np.asarray(jax.devices()[:4]), ("batch",))
    for sharding in [(other, P("batch")), None]:
        restored = make_pipeline(kind, 48, 8, shuffle=True, sharding=sharding)
        restored.set_state(state)
        got = list(restored)
        assert len(got) == len(rest) == 4
        for want, batch in zip(rest, got):
            np.testing.assert_array_equal(np.asarray(batch["x"]), want["x"])
            if sharding is not None:
                assert batch["x"].sharding == NamedSharding(other, P("batch"))
    assert len(seen) == 2


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_check_finite_with_sharding_checks_then_places(kind):
    sharding = NamedSharding(mesh_1d(), P("data"))
    batches = list(make_pipeline(kind, 32, 8, check_finite=True, sharding=sharding))
    assert [b["x"].sharding for b in batches] == [sharding] * 4
    np.testing.assert_array_equal(np.asarray(batches[3]["x"]), np.arange(24, 32) * 2)


def test_a_sharded_pipeline_splits_and_restores_its_nnx_state():
    from flax import nnx

    pipeline = make_pipeline("indexed", 32, 8, shuffle=True, sharding=(mesh_1d(), P("data")))
    iterator = iter(pipeline)
    next(iterator)
    graphdef, state = nnx.split(pipeline)
    state = copy.deepcopy(state)  # a saved copy (the live one moves with the pipeline)
    want = [host(b) for b in iterator]
    other = make_pipeline("indexed", 32, 8, shuffle=True, sharding=(mesh_1d(), P("data")))
    nnx.update(other, state)
    got = [host(b) for b in other]
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g["x"], w["x"])
    assert hash(graphdef) == hash(nnx.split(other)[0])


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_a_field_dimension_that_does_not_split_over_its_mesh_axis_is_named(kind):
    # y is (batch, 4): over a 'model' axis of 2 it splits; over 8 devices it does not
    mesh = Mesh(np.asarray(jax.devices()).reshape(1, 8), ("data", "model"))
    pipeline = make_pipeline(kind, 16, 8, sharding=(mesh, P("data", "model")))
    with pytest.raises(ConfigError, match=r"batch at record 0 of epoch 0, field 'y': dimension 1 "
                       r"has size 4 \(shape \(8, 4\)\), which does not split over the 8 devices "
                       r"of mesh axes \['model'\] that sharding spec \('data', 'model'\) names "
                       r"for it; use a size divisible by 8, or None at that spec entry\."):
        next(iter(pipeline))


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_an_elastic_share_whose_short_batch_does_not_split_is_refused_by_set_state(kind):
    # 96 records on 2 processes, batches of 8 (no short batch in the plain layout); after
    # 3 steps 48 are left: 12 each on 4 processes, a last batch of 4 that 8 devices cannot split
    from datarax.core.errors import StateError

    old = [make_pipeline(kind, 96, 8, shard_index=i, shard_count=2) for i in range(2)]
    iterators = [iter(p) for p in old]
    for iterator in iterators:
        for _ in range(3):
            next(iterator)
    new = make_pipeline(kind, 96, 8, shard_index=0, shard_count=4,
                        sharding=(mesh_1d(), P("data")))
    with pytest.raises(StateError, match=r"an elastic restore\) gives shard 0 of 4 a share of "
                       r"12 records of epoch 0, whose last batch of 4 records does not split over "
                       r"this process's 8 devices \(sharding=\); the state's drop_remainder=False "
                       r"keeps that batch\. Restore it on another process count"):
        new.set_state(old[0].get_state())
    assert (new.epoch, new.position) == (0, 0)  # nothing moved
    plain = make_pipeline(kind, 96, 8, shard_index=0, shard_count=4)  # without sharding=
    plain.set_state(old[0].get_state())
    assert [len(host(b)["x"]) for b in plain] == [8, 4]


def test_a_process_of_several_devices_keeps_no_compiled_steps_on_disk(tmp_path, monkeypatch):
    """The compiled-step store is for one-device processes: on a mesh every step is
    compiled in the process, and the elastic pieces that once met a mismatched
    executable run as without the store."""
    from datarax.core import compiled_store
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(tmp_path / "store"))
    stored = compiled_store.counts()["stored"]
    data = {"x": np.arange(40, dtype=np.int32)}
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(shuffle=True, seed=1), data),
                        batch_size=8, sharding=NamedSharding(mesh_1d(), P("data")))
    served = sorted(int(v) for b in pipeline for v in np.asarray(b["x"]))
    assert served == list(range(40))
    assert compiled_store.counts()["stored"] == stored
    assert not list((tmp_path / "store").glob("*.exe"))
