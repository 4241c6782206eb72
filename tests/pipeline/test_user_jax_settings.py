"""A typical pipeline under the JAX settings users set in their own processes: the same
batches as with JAX's defaults, and every setting left as the user set it. The settings
are entered with JAX's context managers here, so nothing leaks into other tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import SpecMismatchError
from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

IMAGES = np.arange(24 * 2 * 3, dtype=np.uint8).reshape(24, 2, 3)


def flip(element, key):
    image = element.data["image"]
    flipped = jax.random.bernoulli(key, jnp.float32(0.5))
    return element.update_data({"image": jnp.where(flipped, image[:, ::-1], image)})


def scale(element, key=None):
    return element.update_data({"image": element.data["image"] / 255})


def typical(text: bool = False, records: int = 24, batch_size: int = 4) -> Pipeline:
    """Shuffle, a random flip, /255, a filter; ``text``: a text field and /255 alone (a
    compiled filter cannot read MemorySource's text)."""
    data = {"image": IMAGES[:records], "label": np.arange(records) % 10}
    if text:
        data["word"] = [f"w{i % 10}" for i in range(records)]  # as the label
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3), data)
    stages = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=scale)]
    if not text:  # (kept short: under disable_jit each primitive compiles on its own)
        stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip), *stages,
                  FilterOperator(predicate=lambda el: el.data["label"] < 7)]
    return Pipeline(source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(0))


def arrays(batches) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in b.items()} for b in batches]


def assert_same(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert list(a) == list(b)
        for k in a:
            assert a[k].dtype == b[k].dtype, k
            np.testing.assert_array_equal(a[k], b[k])


SETTINGS = {
    "debug_nans": (lambda: jax.debug_nans(True), "jax_debug_nans", True),
    "rank_promotion_raise": (lambda: jax.numpy_rank_promotion("raise"),
                             "jax_numpy_rank_promotion", "raise"),
    "dtype_promotion_strict": (lambda: jax.numpy_dtype_promotion("strict"),
                               "jax_numpy_dtype_promotion", "strict"),
    "matmul_precision_highest": (lambda: jax.default_matmul_precision("highest"),
                                 "jax_default_matmul_precision", "highest"),
    "disable_jit": (jax.disable_jit, "jax_disable_jit", True),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_a_typical_pipeline_gives_the_default_batches_and_leaves_the_setting(name):
    enter, option, value = SETTINGS[name]
    want = arrays(typical())
    assert [len(b["label"]) for b in want] == [4, 4, 4, 4, 2]  # 18 of 24 labels below 7
    with enter():
        got = arrays(typical())
        assert getattr(jax.config, option) == value
    assert_same(got, want)


def test_disable_jit_runs_the_stored_step_op_by_op_with_text_fields():
    """A text field's pass runs a stored compiled step, which JAX refuses to call under
    disable_jit: the step's function runs op by op there instead."""
    want = arrays(typical(text=True, records=8, batch_size=8))
    assert want[0]["word"].tolist() == [f"w{i}" for i in want[0]["label"]]
    with jax.disable_jit():
        got = arrays(typical(text=True, records=8, batch_size=8))
    assert_same(got, want)


def test_a_memory_source_built_without_x64_keeps_its_int32_columns_under_x64():
    source = MemorySource(MemorySourceConfig(), {"label": np.arange(6)})
    with jax.enable_x64(True):
        batches = arrays(Pipeline(source, [], batch_size=4))
    assert [b["label"].dtype for b in batches] == [np.int32, np.int32]
    assert [b["label"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]]


def test_a_memory_source_built_with_x64_and_read_without_it_is_told_to_be_built_again():
    with jax.enable_x64(True):
        source = MemorySource(MemorySourceConfig(), {"label": np.arange(6)})
    with pytest.raises(SpecMismatchError) as err:
        next(iter(Pipeline(source, [], batch_size=4)))
    assert str(err.value) == (
        "MemorySource.element_spec() declares 64-bit field(s) 'label' (int64) but "
        "jax_enable_x64 is off, so JAX would silently narrow them to 32 bits. MemorySource "
        "took its dtypes when it was built, while x64 was on: build it again with x64 off "
        "(int64 columns that fit become int32; float64 needs cast_float64=True) or turn x64 "
        "back on with jax.config.update('jax_enable_x64', True)."
    )


def test_debug_nans_names_the_stage_op_that_made_a_nan():
    """Under jax_debug_nans a stored program's NaN check names no op: the step runs as its
    jax.jit, which names it."""
    def log(element, key=None):
        return element.update_data({"x": jnp.log(element.data["x"])})

    source = MemorySource(MemorySourceConfig(), {"x": np.array([1.0, -1.0], np.float32)})
    stage = ElementOperator(ElementOperatorConfig(stochastic=False), fn=log)
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in log"):
            next(iter(Pipeline(source, [stage], batch_size=2)))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_disable_jit_runs_the_stages_op_by_op_on_the_prefetch_worker_too(prefetch):
    """JAX keeps disable_jit per thread: the worker preparing batches ahead enters it as
    the loop's thread has it, so a stage sees each batch's values, not a tracer."""
    calls = []

    def centered(batch):  # a batch-level stage: called on the batch itself
        calls.append(isinstance(batch["x"], jax.core.Tracer))
        return {"x": batch["x"] - 1}

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(12, dtype=np.float32)})
    pipeline = Pipeline(source, [centered], batch_size=4, prefetch=prefetch)
    with jax.disable_jit():
        got = [np.asarray(b["x"]).tolist() for b in pipeline]
    assert got == [[-1, 0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10]]
    assert calls.count(False) == 3  # each batch's stage call on values
