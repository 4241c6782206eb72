"""``Pipeline.step()`` and ``Pipeline.scan()``: the batches a Python loop serves, fused."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, StaleIteratorError
from devices_sources import host, make_pipeline

N, B = 20, 4  # 5 batches an epoch


def loop_batches(epochs: int, **kwargs) -> list[dict[str, np.ndarray]]:
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True, **kwargs)
    return [host(b) for _ in range(epochs) for b in pipeline]


def assert_same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for name in w:
            np.testing.assert_array_equal(g[name], w[name], err_msg=name)


def echo(batch):
    """A train step with no model: returns the batch it was given."""
    return batch


def unstack(out: dict) -> list[dict]:
    out = host(out)
    return [{k: v[i] for k, v in out.items()} for i in range(len(next(iter(out.values()))))]


def test_step_serves_the_loop_batches_across_epochs_and_resumes():
    want = loop_batches(3)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    got = [host(pipeline.step()) for _ in range(7)]
    assert_same(got, want[:7])
    assert (pipeline.epoch, pipeline.position) == (1, 8)
    state = pipeline.get_state()
    restored = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    restored.set_state(state)
    assert_same([host(restored.step()) for _ in range(8)], want[7:15])


def test_scan_serves_the_loop_batches_in_chunks_across_epochs():
    want = loop_batches(3)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    got = []
    for _ in range(4):  # 4 chunks of 3 = 12 batches, across two epoch ends
        got += unstack(pipeline.scan(echo, length=3))
    assert_same(got, want[:12])
    assert (pipeline.epoch, pipeline.position) == (2, 8)


def test_scan_resumes_exactly_mid_way_and_hands_over_to_the_loop():
    want = loop_batches(3)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    unstack(pipeline.scan(echo, length=4))
    state = pipeline.get_state()  # taken between chunks: epoch 0, 16 records
    assert (state["epoch"], state["position"]) == (0, 16)
    restored = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    restored.set_state(state)
    got = unstack(restored.scan(echo, length=3))  # batch 4 of epoch 0, then epoch 1
    got += [host(b) for b in restored]  # the loop continues the pass the scan left
    assert_same(got, want[4:10])


def test_scan_after_a_finished_pass_starts_the_next_epoch():
    want = loop_batches(2)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    list(pipeline)
    assert_same(unstack(pipeline.scan(echo, length=2)), want[5:7])


class Linear(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.zeros((4,), jnp.float32))


def train_step(model: Linear, optimizer: nnx.Optimizer, batch: dict) -> jax.Array:
    target = batch["x"].astype(jnp.float32)

    def loss_fn(model):
        return jnp.mean((batch["y"] @ model.w - target) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def test_scan_trains_like_the_python_loop():
    def fresh():
        model = Linear()
        return model, nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)

    model, optimizer = fresh()
    step = nnx.jit(train_step)
    pipeline = make_pipeline("indexed", N, B, shuffle=True)
    losses = [float(step(model, optimizer, pipeline.step())) for _ in range(8)]

    fused_model, fused_optimizer = fresh()
    fused = make_pipeline("indexed", N, B, shuffle=True)
    fused_losses = np.concatenate([
        np.asarray(fused.scan(train_step, length=4, modules=(fused_model, fused_optimizer)))
        for _ in range(2)
    ])
    np.testing.assert_allclose(fused_losses, losses, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fused_model.w), np.asarray(model.w), rtol=1e-5)
    assert not np.allclose(np.asarray(model.w), 0)
    assert int(fused_optimizer.step.value) == 8


def test_scan_supersedes_the_live_iterator():
    pipeline = make_pipeline("indexed", N, B)
    iterator = iter(pipeline)
    first = host(next(iterator))
    out = unstack(pipeline.scan(echo, length=1))
    np.testing.assert_array_equal(first["x"], np.arange(4) * 2)
    np.testing.assert_array_equal(out[0]["x"], np.arange(4, 8) * 2)
    with pytest.raises(StaleIteratorError):
        next(iterator)


def test_scan_refuses_what_it_cannot_run():
    with pytest.raises(ConfigError, match=r"Pipeline.scan needs an indexed source .*; Rows is "
                       r"a host source\. Iterate it with a Python loop"):
        make_pipeline("host", N, B).scan(echo, length=2)
    with pytest.raises(ConfigError, match=r"an epoch of 22 records ends in a short batch of 2; "
                       r"set drop_remainder=True"):
        make_pipeline("indexed", 22, B).scan(echo, length=2)
    with pytest.raises(ConfigError, match=r"length must be an int >= 1, got 0\."):
        make_pipeline("indexed", N, B).scan(echo, length=0)
    # drop_remainder: the scan skips the short batch exactly as the loop does
    looped = make_pipeline("indexed", 22, B, drop_remainder=True)
    want = [host(b) for _ in range(2) for b in looped]
    assert len(want) == 10
    pipeline = make_pipeline("indexed", 22, B, drop_remainder=True)
    assert_same(unstack(pipeline.scan(echo, length=7)), want[:7])


def test_scan_with_sharding_compiles_once_and_trains_like_without():
    # A second scan of the same length runs the compiled program again: train_step is
    # traced once (was: twice, the state the first call wrote back placed on the mesh
    # changed the input types of the second), and the model trains as without sharding.
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    traced = []

    def counted(model, optimizer, batch):
        traced.append(1)
        return train_step(model, optimizer, batch)

    runs = {}
    for sharding in (None, (mesh, jax.sharding.PartitionSpec("data"))):
        traced.clear()
        model = Linear()
        optimizer = nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)
        pipeline = make_pipeline("indexed", N, B, shuffle=True, sharding=sharding)
        losses = [np.asarray(pipeline.scan(counted, length=3, modules=(model, optimizer)))
                  for _ in range(3)]
        assert len(traced) == 1, sharding
        assert int(optimizer.step.value) == 9
        runs[sharding is None] = (np.concatenate(losses), np.asarray(model.w))
    np.testing.assert_allclose(runs[False][0], runs[True][0], rtol=1e-6)
    np.testing.assert_allclose(runs[False][1], runs[True][1], rtol=1e-6)


def test_a_scan_whose_train_step_raises_leaves_the_live_pass_to_continue():
    want = loop_batches(2)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True)
    got = [host(pipeline.step()) for _ in range(2)]

    def raising(batch):
        raise RuntimeError("train step failed")

    with pytest.raises(RuntimeError, match="train step failed"):
        pipeline.scan(raising, length=2)
    assert (pipeline.epoch, pipeline.position) == (0, 8)
    got += [host(pipeline.step()) for _ in range(3)]  # the rest of epoch 0, then epoch 1
    assert_same(got, want[:5])


def test_scan_names_the_call_a_train_step_of_the_wrong_signature_cannot_take():
    pipeline = make_pipeline("indexed", N, B)

    def needs_two_modules(model, optimizer, batch):
        return batch

    with pytest.raises(ConfigError, match=r"train_step\(\*modules, batch\): here 1 module "
                       r"then the batch.*needs_two_modules\(model, optimizer, batch\)"):
        pipeline.scan(needs_two_modules, length=1, modules=(nnx.Rngs(0),))
    with pytest.raises(ConfigError, match=r"modules\[0\] is a ndarray; modules= takes the NNX"):
        pipeline.scan(needs_two_modules, length=1, modules=(np.ones(2), np.ones(2)))
    assert (pipeline.epoch, pipeline.position) == (0, 0)
    assert_same(unstack(pipeline.scan(echo, length=1)), [host(next(iter(
        make_pipeline("indexed", N, B))))])


def test_a_scan_longer_than_positions_can_count_is_refused_before_anything_moves():
    """The last step's position is checked before the positions are laid out: a huge
    length is refused at once, naming it, and the pipeline stays where it stood."""
    pipeline = make_pipeline("indexed", N, B)
    with pytest.raises(OverflowError, match=r"^Pipeline.scan length=10{30} would run to epoch "
                       r"\d+ of a 20-record source, whose global record positions pass \d+, "
                       r"the largest int\d\d holds; scan fewer steps per call"):
        pipeline.scan(echo, length=10**30)
    assert (pipeline.epoch, pipeline.position) == (0, 0)
    looped = [host(b) for b in make_pipeline("indexed", N, B)]
    assert_same(unstack(pipeline.scan(echo, length=np.int64(7))), looped + looped[:2])
    assert (pipeline.epoch, pipeline.position) == (1, 8)


@pytest.mark.parametrize("under_mesh", [False, True])
def test_scan_with_sharding_over_a_mesh_of_explicit_axes(under_mesh):
    # with_sharding_constraint only asserts over Explicit axes (was: JAX's error that the
    # batch's P(None) does not match P('data')): the batch is resharded there instead,
    # with or without jax.set_mesh around the call.
    from jax.sharding import AxisType, Mesh, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",), axis_types=(AxisType.Explicit,))
    want = loop_batches(2)
    pipeline = make_pipeline("indexed", N, B, shuffle=True, stochastic=True,
                             sharding=(mesh, PartitionSpec("data")))
    scope = jax.set_mesh(mesh) if under_mesh else contextlib.nullcontext()
    with scope:
        out = pipeline.scan(echo, length=7)
    assert_same(unstack(out), want[:7])
    assert out["y"].sharding.spec == PartitionSpec(None, "data", None)
    assert (pipeline.epoch, pipeline.position) == (1, 8)


class Seen(nnx.Module):
    def __init__(self) -> None:
        self.steps = nnx.Variable(jnp.int32(0))


def count_steps(seen: Seen, batch: dict) -> jax.Array:
    seen.steps.value += 1
    return batch["x"]


def test_a_ctrl_c_in_the_scan_write_back_moves_the_modules_and_the_position_together(
        monkeypatch):
    """Ctrl-C after the compiled scan ran, between the modules' write-back and the
    position's: both still move (the carry consumed those batches), then it raises."""
    pipeline = make_pipeline("indexed", N, B)
    seek, armed = type(pipeline.source).seek, [True]

    def interrupted(self, *args, **kwargs):
        if armed:
            armed.clear()
            raise KeyboardInterrupt
        seek(self, *args, **kwargs)

    monkeypatch.setattr(type(pipeline.source), "seek", interrupted)
    seen = Seen()
    with pytest.raises(KeyboardInterrupt):
        pipeline.scan(count_steps, length=2, modules=seen)
    assert int(seen.steps.value) == 2 and (pipeline.epoch, pipeline.position) == (0, 8)
    assert np.asarray(pipeline.scan(count_steps, length=1, modules=seen)).tolist() == [
        (np.arange(8, 12) * 2).tolist()]
    assert int(seen.steps.value) == 3 and pipeline.position == 12
