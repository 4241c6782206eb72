"""``Pipeline(stages_on="host")``: the compiled step on the host CPU, batches on the
device after; the same batches and resume as ``stages_on="device"``.

On this CPU-only machine both choices resolve to the CPU; these tests pin the values,
the state and the host path's plumbing (the step's arguments on the CPU device, the
columns copied once per pipeline). ``eight/check_stages_on.py`` runs the same path
where the default device is another CPU device than the stages'.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig
from devices_sources import host, make_pipeline, make_source

CPU = jax.local_devices(backend="cpu")[0]


def flip(el: Any, key: Any) -> Any:
    """W1's per-record random flip (of the image's width axis)."""
    x = el.data["image"]
    return el.update_data({"image": jnp.where(jax.random.bernoulli(key), x[:, ::-1], x)})


def integer_math(el: Any, key: Any = None) -> Any:
    x = el.data["image"].astype(jnp.int32)
    return el.update_data({"image": x, "sum": (x * 3 + 7).sum() % 1009})


def scale(el: Any, key: Any = None) -> Any:
    """W1's /255 (float)."""
    return el.update_data({"image": el.data["image"].astype(jnp.float32) / 255})


def images(n: int = 60) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"image": rng.integers(0, 256, (n, 6, 5, 3), dtype=np.uint8),
            "label": np.arange(n, dtype=np.int32)}


def w1(stages_on: str, tail: Any, n: int = 60, batch_size: int = 8, **kwargs: Any) -> Pipeline:
    """W1-like: a shuffled MemorySource, a per-record flip, then ``tail``."""
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4), images(n))
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip), *tail]
    return Pipeline(source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(2),
                    stages_on=stages_on, **kwargs)


def epochs(pipeline: Any, count: int = 2) -> list[dict[str, np.ndarray]]:
    return [host(b) for _ in range(count) for b in pipeline]


def exact_tail() -> list[Any]:
    return [ElementOperator(ElementOperatorConfig(), fn=integer_math)]


def assert_same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_integer_chain_gives_identical_batches_both_ways():
    device, on_host = w1("device", exact_tail()), w1("host", exact_tail())
    assert (device.stages_on, on_host.stages_on) == ("device", "host")
    batches = epochs(on_host)
    assert_same(epochs(device), batches)
    assert batches[0]["image"].dtype == np.int32 and len(batches) == 2 * 8  # 60 / 8: 8 a pass


def test_float_chain_within_the_documented_tolerance():
    device, on_host = epochs(w1("device", [ElementOperator(ElementOperatorConfig(), fn=scale)])), \
        epochs(w1("host", [ElementOperator(ElementOperatorConfig(), fn=scale)]))
    for x, y in zip(device, on_host, strict=True):
        np.testing.assert_allclose(y["image"], x["image"], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(y["label"], x["label"])


def test_grouped_small_batches_identical():
    # 1100 records in batches of 2: a long pass, several batches computed per dispatch
    device = w1("device", exact_tail(), n=1100, batch_size=2)
    on_host = w1("host", exact_tail(), n=1100, batch_size=2)
    assert_same(epochs(device, 1), epochs(on_host, 1))


def test_filtered_path_identical():
    def even(el: Any) -> Any:
        return el.data["label"] % 2 == 0

    def build(stages_on: str) -> Pipeline:
        return w1(stages_on, [FilterOperator(predicate=even), *exact_tail()])

    got = epochs(build("host"))
    assert_same(epochs(build("device")), got)
    assert all((b["label"] % 2 == 0).all() for b in got)
    assert sorted(np.concatenate([b["label"] for b in got[:4]]).tolist()) == list(range(0, 60, 2))


@pytest.mark.parametrize("kind", ["host", "stream"])
def test_host_sources_identical(kind):
    device = make_pipeline(kind, 23, 4, stochastic=kind != "stream", shuffle=kind == "host")
    on_host = make_pipeline(kind, 23, 4, stochastic=kind != "stream", shuffle=kind == "host",
                            stages_on="host")
    got = epochs(on_host)
    assert_same(epochs(device), got)
    assert all(b[k].dtype != object for b in got for k in b)


def test_host_source_filtered_identical():
    def small(el: Any) -> Any:
        return el.data["x"] < 15

    def build(stages_on: str) -> Pipeline:
        return Pipeline(source=make_source("host", 23), stages=[FilterOperator(predicate=small)],
                        batch_size=4, stages_on=stages_on)

    got = epochs(build("host"))
    assert_same(epochs(build("device")), got)
    assert np.concatenate([b["x"] for b in got]).tolist() == list(range(15)) * 2


def test_step_arguments_on_the_cpu_and_columns_copied_once():
    pipeline = w1("host", exact_tail(), check_finite=True)  # check_finite: batches unplaced
    context = pipeline._context()
    first, second = IndexedDispatch(context, 0), IndexedDispatch(context, 1)
    leaves = jax.tree.leaves((first.inputs, first.state, first.key))
    assert leaves and all(leaf.devices() == {CPU} for leaf in leaves)
    # one copy of the columns per pipeline, whatever the pass (a shuffled source adds
    # its epoch's order table, new each pass: inputs are (columns, order) then)
    def columns(inputs: Any) -> list[Any]:
        return jax.tree.leaves(inputs[0] if isinstance(inputs, tuple) else inputs)

    assert all(a is b for a, b in zip(columns(first.inputs), columns(second.inputs), strict=True))
    _, batch, _ = first.dispatch_one()
    assert batch["image"].devices() == {CPU}
    handed = next(iter(pipeline))
    assert handed["image"].devices() == {jax.devices()[0]}


def test_state_restores_into_the_other_choice():
    for saved_on, restored_on in (("host", "device"), ("device", "host")):
        whole = epochs(w1(saved_on, exact_tail()), 1)
        first = w1(saved_on, exact_tail())
        iterator = iter(first)
        head = [host(next(iterator)) for _ in range(3)]
        state = first.get_state()
        second = w1(restored_on, exact_tail())
        second.set_state(state)
        assert_same(whole, head + [host(b) for b in second])


def test_text_fields_on_the_host_path():
    def label_times_two(el: Any, key: Any = None) -> Any:
        return el.update_data({"label": el.data["label"] * 2})

    def build(stages_on: str, read_as_host: bool) -> Pipeline:
        data = {"label": np.arange(7, dtype=np.int32), "name": [f"r{i}" for i in range(7)]}
        source: Any = MemorySource(MemorySourceConfig(), data)
        if read_as_host:
            source = ConcatSource([source])
        return Pipeline(source=source, batch_size=3,
                        stages=[ElementOperator(ElementOperatorConfig(), fn=label_times_two)],
                        stages_on=stages_on)

    for read_as_host in (False, True):  # indexed (text joined after the step), host source
        device, on_host = list(build("device", read_as_host)), list(build("host", read_as_host))
        assert [b["name"] for b in on_host] == [b["name"] for b in device]
        assert [b["name"] for b in on_host][0] == ["r0", "r1", "r2"]
        labels = [np.asarray(b["label"]).tolist() for b in on_host]
        assert labels == [[0, 2, 4], [6, 8, 10], [12]]
        assert on_host[0]["label"].devices() == {jax.devices()[0]}


@pytest.mark.parametrize("bad", ["cpu", "Host", None, 1])
def test_unknown_choice_refused(bad):
    with pytest.raises(ConfigError, match=r"stages_on must be 'device' .* or 'host' .*got"):
        w1(bad, [])


def test_scan_refused_on_host():
    pipeline = w1("host", [], drop_remainder=True)
    with pytest.raises(ConfigError, match="stages_on='host'.*Iterate it"):
        pipeline.scan(lambda batch: batch["label"].sum(), length=2)
    assert pipeline.position == 0
