"""The `make demo` job: trains, checkpoints mid-epoch and verifies the resume."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.cli.demo import Classifier, build_classifier, conv_as_matmul, run_demo
from datarax.cli.main import main


def accuracy_printed(printed: str) -> float:
    """The demo's "test accuracy: 0.912" line, as a number."""
    (line,) = [line for line in printed.splitlines() if line.startswith("test accuracy: ")]
    return float(line.split(": ")[1])


# Each way of training runs once: the Python loop through run_demo (its metrics and its
# report), Pipeline.scan through the command line's main() (the report it prints).
def test_demo_trains_and_resumes_exactly(capsys):
    metrics = run_demo(epochs=2, batch_size=64, seed=0, progress=False)
    printed = capsys.readouterr().out
    assert metrics["resume_exact"] == 1.0
    assert 0.5 < metrics["accuracy"] <= 1.0  # chance is 0.1
    assert metrics["accuracy"] == pytest.approx(accuracy_printed(printed), abs=5e-4)
    assert "identical: True" in printed and "records/s" in printed


def test_cli_runs_the_demo_with_scan_and_it_resumes_exactly(capsys):
    assert main(["demo", "--epochs", "2", "--no-progress", "--scan"]) == 0
    printed = capsys.readouterr().out
    assert "(Pipeline.scan)" in printed and "replayed 11 batches, identical: True" in printed
    assert 0.5 < accuracy_printed(printed) <= 1.0


@pytest.mark.parametrize(("channels", "features", "kernel", "bias"),
                         [(1, 16, (3, 3), True),
                          pytest.param(3, 5, (3, 3), True, marks=pytest.mark.slow),
                          pytest.param(2, 4, (5, 3), False, marks=pytest.mark.slow)])
def test_conv_as_matmul_is_the_convolution_and_its_gradient(channels, features, kernel, bias):
    conv = nnx.Conv(channels, features, kernel_size=kernel, use_bias=bias, rngs=nnx.Rngs(3))
    if bias:  # a non-zero bias, so that adding it is checked too
        conv.bias[...] = jnp.arange(features, dtype=jnp.float32) / 10
    x = jax.random.normal(jax.random.key(0), (4, 7, 6, channels))
    np.testing.assert_allclose(conv_as_matmul(conv, x), conv(x), atol=1e-5)

    def loss(module, f):
        return jnp.sum(jnp.sin(f(module, x)))

    want = nnx.grad(lambda m: loss(m, lambda mm, xx: mm(xx)))(conv)
    got = nnx.grad(lambda m: loss(m, conv_as_matmul))(conv)
    np.testing.assert_allclose(got["kernel"][...], want["kernel"][...], atol=1e-4)


def test_the_demo_classifier_computes_what_its_layers_say():
    model = Classifier(nnx.Rngs(0))
    # the demo initialises it compiled: the same parameters as op by op, bit for bit
    compiled = nnx.to_flat_state(nnx.state(build_classifier(0)))
    eager = nnx.to_flat_state(nnx.state(model))
    assert [path for path, _ in compiled] == [path for path, _ in eager]
    for (path, got), (_, want) in zip(compiled, eager):
        np.testing.assert_array_equal(np.asarray(got[...]), np.asarray(want[...]), err_msg=str(path))
    x = jax.random.uniform(jax.random.key(2), (3, 8, 8, 1))
    h = nnx.relu(model.conv(x)).reshape(3, -1)
    want = model.out(nnx.relu(model.hidden(h)))
    np.testing.assert_allclose(model(x), want, atol=1e-5)


@pytest.mark.parametrize("setting", [{"strides": 2}, {"padding": "VALID"},
                                     {"kernel_dilation": 2}])
def test_conv_as_matmul_refuses_a_convolution_it_does_not_compute(setting):
    conv = nnx.Conv(1, 4, kernel_size=(3, 3), rngs=nnx.Rngs(0), **setting)
    name = next(iter(setting))
    with pytest.raises(ValueError, match=f"{name}={setting[name]!r}.*Call the nnx.Conv itself"):
        conv_as_matmul(conv, jnp.ones((1, 8, 8, 1)))
