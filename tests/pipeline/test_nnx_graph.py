"""A Pipeline through NNX's graph functions and JAX's transforms: ``nnx.clone``,
``nnx.merge`` and ``copy.deepcopy`` build a new pipeline object from a graph definition
that holds the original's bookkeeping; ``step()`` inside a traced train step is refused,
saying why, as is reading a pipeline passed into a jitted function; a pipeline held by a
user's module rides through ``nnx.jit`` and holds no ``nnx.Param``."""

from __future__ import annotations

import copy as copying
import re

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, StaleIteratorError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def make(prefetch: int = 2) -> Pipeline:
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                       {"x": np.arange(11, dtype=np.int32)})
    return Pipeline(source=src, batch_size=3, seed=0, prefetch=prefetch)


def xs(batches):
    return [np.asarray(b["x"]).tolist() for b in batches]


@pytest.fixture(scope="module")
def two_epochs():
    p = make()
    return xs(p) + xs(p)


@pytest.mark.parametrize("build", ["clone", "merge_kept_state", "deepcopy"])
def test_a_copy_made_mid_epoch_continues_it_and_leaves_the_original_live(build, two_epochs):
    p = make()
    it = iter(p)
    first = xs([next(it), next(it)])
    if build == "clone":
        copy = nnx.clone(p)
    elif build == "deepcopy":
        copy = copying.deepcopy(p)
    else:  # the docs' way to keep a state: a copy of nnx.state, merged back later
        graphdef, state = nnx.split(p)
        copy = nnx.merge(graphdef, jax.tree.map(np.array, state))
    assert (copy.epoch, copy.position) == (0, 6)
    assert first + xs(copy) + xs(copy) == two_epochs  # the rest of epoch 0, then epoch 1
    assert first + xs(it) == two_epochs[:4]  # the original's pass was not ended


def test_deepcopy_of_a_record_file_pipeline_continues_its_batches_and_keys(tmp_path):
    """A shuffled ArrayRecord pipeline with a stochastic stage, copied mid-epoch inside a
    structure that also holds its source: the two iterated in turn hand out the same
    batches, the same draws, and each moves only its own position."""
    from int_record_files import int_source, write_int_parts

    from datarax.operators import ElementOperator, ElementOperatorConfig

    def jitter(element, key):
        return element.update_data({"r": jax.random.uniform(key)})

    stage = ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="j"), fn=jitter,
                            rngs=nnx.Rngs(j=3))
    p = Pipeline(source=int_source(write_int_parts(tmp_path, [5, 12]), seed=5, shuffle_files=True),
                 stages=[stage], batch_size=4, seed=0, prefetch=1)
    it = iter(p)
    next(it)
    held = copying.deepcopy({"pipeline": p, "source": p.source})
    twin = held["pipeline"]
    assert held["source"] is twin.source and twin.source is not p.source
    theirs = iter(twin)
    for _ in range(2):
        mine, copied = next(it), next(theirs)
        assert np.asarray(mine["x"]).tolist() == np.asarray(copied["x"]).tolist()
        np.testing.assert_array_equal(mine["r"], copied["r"])
    assert (p.position, twin.position) == (12, 12)
    assert next(it, None) is None and (p.epoch, twin.epoch) == (1, 0)
    assert next(theirs, None) is None and twin.epoch == 1
    assert xs(p) == xs(twin)  # the next epoch: the same order on both


def test_a_merge_of_the_live_state_is_the_same_pipeline():
    p = make()
    it = iter(p)
    next(it)
    alias = nnx.merge(*nnx.split(p))  # the same Variables: one position, one live pass
    assert alias.source.datarax_position.index_var is p.source.datarax_position.index_var
    next(iter(alias))
    with pytest.raises(StaleIteratorError):
        next(it)


@pytest.mark.parametrize("transform", ["jax.jit", "nnx.jit", "next"])
def test_step_inside_a_traced_train_step_is_refused_and_the_pipeline_goes_on(transform,
                                                                             two_epochs):
    p = make(prefetch=0)
    it = iter(p)
    if transform == "nnx.jit":
        train_step = nnx.jit(lambda pipeline, w: w + pipeline.step()["x"].sum())
        call, run = "Pipeline.step()", lambda: train_step(p, 0)
    else:
        step = p.step if transform == "jax.jit" else lambda: next(it)
        train_step = jax.jit(lambda w: w + step()["x"].sum())
        call = "Pipeline.step()" if transform == "jax.jit" else "next() of a Pipeline iterator"
        run = lambda: train_step(0)  # noqa: E731
    with pytest.raises(ConfigError, match=re.escape(f"{call} was called while JAX traces")):
        run()
    assert (p.epoch, p.position) == (0, 0)
    assert xs([next(it), next(it)]) == two_epochs[:2]  # nothing of the trace was kept
    assert xs([p.step() for _ in range(5)]) == two_epochs[2:7]


READS = {
    "iter": lambda pipeline: next(iter(pipeline)),
    "take": lambda pipeline: list(pipeline.take(1)),
    "get_state": lambda pipeline: pipeline.get_state(),
    "position": lambda pipeline: pipeline.position,
    "source next": lambda pipeline: next(pipeline.source),
}


@pytest.mark.parametrize("transform", [jax.jit, nnx.jit], ids=["jax.jit", "nnx.jit"])
@pytest.mark.parametrize("read", list(READS))
def test_a_pipeline_passed_into_a_jitted_function_is_refused_where_it_is_read(read, transform,
                                                                             two_epochs):
    p = make(prefetch=0)
    it = iter(p)
    next(it)
    with pytest.raises(ConfigError, match=re.escape(
            "a source's position (epoch, records handed out) was read while JAX traces a "
            "function: a Pipeline or source passed as an argument into jax.jit")):
        transform(READS[read])(p)
    assert xs([next(it)]) == two_epochs[1:2]  # the trace changed nothing


class Trainer(nnx.Module):
    """A user's module holding the model's parameter and the pipeline side by side."""

    def __init__(self) -> None:
        self.w = nnx.Param(np.zeros((), np.float32))
        self.pipeline = make(prefetch=0)


def test_a_pipeline_inside_a_trainer_module_rides_through_nnx_jit_and_holds_no_param(
        two_epochs):
    trainer = Trainer()

    @nnx.jit
    def train_step(trainer, batch):
        trainer.w.value = trainer.w.value + batch["x"].sum()

    got = []
    for batch in trainer.pipeline:
        got.append(batch)
        train_step(trainer, batch)
    got += list(trainer.pipeline.take(1))
    assert xs(got) == two_epochs[:5]
    assert float(trainer.w.value) == sum(range(11))
    params = nnx.state(trainer, nnx.Param)
    assert list(params.keys()) == ["w"]  # the data position is a plain Variable
    assert nnx.state(trainer.pipeline, nnx.Param) == nnx.State({})
    assert nnx.state(trainer.pipeline, nnx.RngState) == nnx.State({})
