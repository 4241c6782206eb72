"""A stage with state of its own never runs frozen; a pipeline without rngs says so."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.dag import DagOperator
from datarax.operators import ElementOperator, FilterOperator, MapOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def source():
    return MemorySource(MemorySourceConfig(), {"x": np.arange(8, dtype=np.float32),
                                               "label": np.arange(8, dtype=np.int32)})


class Noisy(nnx.Module):
    """The pattern that would run frozen: draws from its own nnx.Rngs."""

    def __init__(self):
        self.rngs = nnx.Rngs(0)

    def __call__(self, batch):
        return {**batch, "x": batch["x"] + jax.random.normal(self.rngs(), batch["x"].shape)}


class Counter(nnx.Module):
    """Writes a Variable every batch (the write would be dropped)."""

    def __init__(self):
        self.seen = nnx.Variable(jnp.zeros((), jnp.int32))

    def __call__(self, batch):
        self.seen.set_value(self.seen.get_value() + 1)
        return batch


class Scale(nnx.Module):
    """Holds a parameter it only reads: allowed."""

    def __init__(self):
        self.factor = nnx.Param(jnp.float32(3.0))

    def __call__(self, batch):
        return {**batch, "x": batch["x"] * self.factor.get_value()}


HINT = "ElementOperator(fn=f, stochastic=True)"


def test_a_module_stage_holding_rngs_is_refused_at_construction_naming_it():
    with pytest.raises(ConfigError) as err:
        Pipeline(source=source(), stages=[Scale(), Noisy()], batch_size=4, rngs=nnx.Rngs(0))
    message = str(err.value)
    assert message.startswith(
        "Pipeline stage 1 (Noisy) holds RNG streams (rngs/default/count, rngs/default/key)."
    )
    assert "run frozen" in message and HINT in message


def test_a_graph_node_holding_rngs_is_refused_naming_the_node():
    with pytest.raises(ConfigError, match=r"DagOperator node 'noise' \(Noisy\) holds RNG streams"):
        Pipeline.from_dag(source(), nodes={"noise": Noisy()}, edges={"noise": ["source"]},
                          sink="noise", batch_size=4, rngs=nnx.Rngs(0))


def test_a_stage_writing_its_variables_is_refused_before_any_batch_is_served():
    pipe = Pipeline(source=source(), stages=[Counter()], batch_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError) as err:
        next(iter(pipe))
    assert str(err.value).startswith(
        "Pipeline stage 0 (Counter) writes its nnx.Variable(s) ['seen'] while it runs."
    )
    assert HINT in str(err.value)
    graph = DagOperator({"count": Counter()}, {"count": ["source"]}, "count")
    with pytest.raises(ConfigError, match=r"DagOperator node 'count' \(Counter\) writes its "
                                          r"nnx.Variable\(s\) \['seen'\]"):
        next(iter(Pipeline(source=source(), stages=[graph], batch_size=4, rngs=nnx.Rngs(0))))


def test_a_module_stage_that_only_reads_its_parameters_still_runs():
    pipe = Pipeline(source=source(), stages=[Scale()], batch_size=4, rngs=nnx.Rngs(0))
    batches = list(pipe)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), np.arange(8) * 3.0)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]), np.arange(8))
    graph = Pipeline.from_dag(source(), nodes={"scale": Scale()}, edges={"scale": ["source"]},
                              sink="scale", batch_size=8, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(next(iter(graph))["x"], np.arange(8) * 3.0)


def noise(element, key):
    return {"x": element.data["x"] + jax.random.uniform(key)}


def build(stages, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe = Pipeline(source=source(), stages=stages, batch_size=4, **kwargs)
        list(pipe)
        list(pipe)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)], caught


def test_a_stochastic_stage_without_rngs_warns_once_naming_the_stage():
    messages, caught = build([MapOperator(fn=lambda a: a), ElementOperator(fn=noise, stochastic=True)])
    assert messages == [
        "Pipeline built without seed or rngs: stochastic stage(s) 1 (ElementOperator "
        "'noise') draw from the default seed 0, the same in every run. Pass seed=N (or "
        "rngs=nnx.Rngs(N)) to Pipeline to choose the seed."
    ]
    assert caught[0].filename == __file__  # points at the user's line


def test_no_warning_with_rngs_a_stage_of_its_own_rngs_or_no_stochastic_stage():
    assert build([ElementOperator(fn=noise, stochastic=True)], rngs=nnx.Rngs(1))[0] == []
    own = ElementOperator(fn=noise, stochastic=True, rngs=nnx.Rngs(2))
    assert build([own])[0] == []
    assert build([MapOperator(fn=lambda a: a + 1)])[0] == []


def test_an_error_raised_by_user_code_in_a_stage_names_the_stage():
    def broken(element, key=None):
        return {"y": element.data["missing"]}

    stages = [ElementOperator(fn=lambda el, key=None: el, name="fine"),
              ElementOperator(fn=broken, name="reads-missing")]
    pipeline = Pipeline(source(), stages=stages, batch_size=4)
    with pytest.raises(KeyError, match="missing") as info:
        next(iter(pipeline))
    assert "raised in Pipeline stage 1 (ElementOperator 'reads-missing')" in info.value.__notes__


def test_a_datarax_error_from_a_stage_is_noted_with_its_position():
    pipeline = Pipeline(source(), stages=[ElementOperator(fn=lambda el, key=None: 3, name="three")],
                        batch_size=4)
    with pytest.raises(Exception, match="fn must return an Element") as info:
        next(iter(pipeline))
    assert [n for n in info.value.__notes__ if "raised in" in n] == [
        "raised in Pipeline stage 0 (ElementOperator 'three')"]


def test_an_error_after_a_filter_names_its_stage_as_one_before_it_does():
    def branchy(element, key=None):
        return {"y": 1 if element.data["x"] else 0}  # Python `if` on a traced field

    for stages, at in (([ElementOperator(fn=branchy, name="branchy"),
                         FilterOperator(predicate=lambda e: e.data["x"] > 1)], 0),
                       ([FilterOperator(predicate=lambda e: e.data["x"] > 1),
                         ElementOperator(fn=branchy, name="branchy")], 1)):
        with pytest.raises(ConfigError, match="fn needs a concrete value") as info:
            next(iter(Pipeline(source(), stages=stages, batch_size=4)))
        assert [n for n in info.value.__notes__ if "raised in" in n] == [
            f"raised in Pipeline stage {at} (ElementOperator 'branchy')"]
