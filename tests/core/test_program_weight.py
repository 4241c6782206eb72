"""A data step whose chain of ops is too long for XLA's elemental fusion emitters (which
datarax asks for on CPU) is compiled with XLA's own emitters: a stage of 2,000 chained
``sin`` steps ended the process with a segmentation fault before
(``datarax.core.program_weight``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from datarax.core import compiled_store
from datarax.core.program_weight import ELEMENTAL_MAX_WEIGHT, program_weight

SRC = Path(__file__).resolve().parents[2] / "src"
EMITTERS = "xla_cpu_use_fusion_emitters"


def _chain(steps: int):
    def chain(x):
        for _ in range(steps):
            x = jax.lax.erf_inv(jnp.tanh(x))  # XLA expands erf_inv into a dozen ops
        return x

    return chain


def test_a_long_chain_weighs_more_than_the_elemental_emitters_take():
    short = jax.jit(_chain(2)).lower(jnp.zeros(4)).as_text()
    long = jax.jit(_chain(100)).lower(jnp.zeros(4)).as_text()
    assert program_weight(short) < ELEMENTAL_MAX_WEIGHT < program_weight(long)


def test_a_function_counts_at_each_call():
    inner = jax.jit(_chain(10))

    def calls(x):
        for _ in range(20):
            x = inner(x)  # one private function in the text, called 20 times
        return x

    once = program_weight(jax.jit(inner).lower(jnp.zeros(4)).as_text())
    assert program_weight(jax.jit(calls).lower(jnp.zeros(4)).as_text()) > 20 * (once - 10)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the option is a CPU one")
def test_only_a_long_chain_leaves_the_elemental_emitters_out():
    short = jax.jit(_chain(2)).lower(jnp.zeros(4)).as_text()
    long = jax.jit(_chain(100)).lower(jnp.zeros(4)).as_text()
    assert compiled_store.compiler_options(short)[EMITTERS] is False
    assert EMITTERS not in compiled_store.compiler_options(long)
    assert compiled_store.compiler_options()[EMITTERS] is False  # no program: as set


DEEP_STAGE = """
    import jax.numpy as jnp, numpy as np
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    def deep(el, key=None):
        x = el.data["x"]
        for i in range(2000):
            x = jnp.sin(x * 1.0001 + i)
        return el.update_data({"x": x})

    source = MemorySource(MemorySourceConfig(), {"x": np.linspace(0, 1, 8, dtype=np.float32)})
    pipeline = Pipeline(source=source, batch_size=8,
                        stages=[ElementOperator(ElementOperatorConfig(), fn=deep)])
    expected = np.linspace(0, 1, 8, dtype=np.float32)
    for i in range(2000):
        expected = np.sin(expected * np.float32(1.0001) + np.float32(i))
    got = np.asarray(next(iter(pipeline))["x"])
    print(float(np.abs(got - expected).max()))
"""


@pytest.mark.slow  # one compile of a 6,000-op chain (~5 s)
def test_a_stage_too_deep_for_the_elemental_emitters_runs():
    env = {**os.environ, "PYTHONPATH": str(SRC), "JAX_PLATFORMS": "cpu",
           "DATARAX_COMPILE_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(DEEP_STAGE)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # was -11 (SIGSEGV)
    assert float(done.stdout.split()[-1]) < 1e-3
