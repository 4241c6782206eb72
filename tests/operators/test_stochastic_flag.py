"""A function that draws from its key in a stage built with stochastic=False is refused
with a message naming the stage and the config it needs (issue 10, item 6), on the
compiled path and the host path; other failures are not mistaken for it."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def add_noise(element, key):
    return element.update_data({"x": element.data["x"] + jax.random.uniform(key)})


def split_first(element, key):
    _, sub = jax.random.split(key)
    return element.update_data({"x": element.data["x"] * jax.random.bernoulli(sub)})


def uses_a_missing_field(element, key):
    return element.update_data({"x": element.data.get("y") + 1})


def memory_pipeline(fn, stochastic=False):
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.float32)})
    stages = [lambda batch: batch, ElementOperator(ElementOperatorConfig(stochastic=stochastic), fn=fn)]
    return Pipeline(source=source, stages=stages, batch_size=4, rngs=nnx.Rngs(0))


def message(name):
    return (
        f"Pipeline stage 1 (ElementOperator '{name}') uses its random key, but it was built "
        "with stochastic=False, so its function gets key=None. Build it with "
        "ElementOperatorConfig(stochastic=True) to give each record its own key."
    )


@pytest.mark.parametrize("fn", [add_noise, split_first], ids=lambda f: f.__name__)
def test_a_key_used_in_a_deterministic_stage_names_the_stage_and_the_fix(fn):
    with pytest.raises(ConfigError) as err:
        next(iter(memory_pipeline(fn)))
    assert str(err.value) == message(fn.__name__)
    assert isinstance(err.value.__cause__, TypeError)  # JAX's own error stays attached


def test_the_host_path_says_the_same(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float32))
    source = NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"), field="x"))
    stage = ElementOperator(ElementOperatorConfig(), fn=add_noise, name="jitter")
    pipeline = Pipeline(source=source, stages=[stage], batch_size=2)
    with pytest.raises(ConfigError) as err:
        next(iter(pipeline))
    assert str(err.value) == message("jitter").replace("stage 1", "stage 0")
    source.close()


def test_other_failures_about_none_are_not_taken_for_a_key_problem():
    with pytest.raises(TypeError, match="unsupported operand type"):
        next(iter(memory_pipeline(uses_a_missing_field)))


def test_the_same_function_runs_in_a_stochastic_stage():
    batch = next(iter(memory_pipeline(add_noise, stochastic=True)))
    noise = np.asarray(batch["x"]) - np.arange(4, dtype=np.float32)
    assert noise.shape == (4,) and ((noise >= 0) & (noise < 1)).all()
    assert len(set(noise.tolist())) == 4  # one key per record


def test_a_stage_rngs_without_its_stream_is_a_config_error_naming_the_stream() -> None:
    with pytest.raises(ConfigError, match=r"ElementOperator: rngs has no stream 'augment' and no "
                                          r"'default' stream; pass nnx.Rngs\(augment=seed\)"):
        ElementOperator(fn=lambda e, k: e, stochastic=True, stream_name="augment",
                        rngs=nnx.Rngs(params=0))


def test_a_stochastic_element_operator_called_without_keys_names_itself():
    from datarax.core.errors import DataraxError

    op = ElementOperator(fn=lambda element, key: {"u": jax.random.uniform(key)},
                         stochastic=True, name="draw")
    with pytest.raises(DataraxError) as err:  # not JAX's "unexpected PRNG key type"
        op.apply_batch({"x": np.zeros(3, np.float32)}, None)
    assert str(err.value) == ("ElementOperator 'draw' is stochastic but got no keys; run it "
                              "in a Pipeline or pass one key per record.")
