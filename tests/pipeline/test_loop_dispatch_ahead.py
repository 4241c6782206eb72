"""A compiled pass dispatched ahead on the loop's own thread (the TPU and GPU path:
``WORKER_BACKENDS`` without the backend), run here on the CPU: the same batches and
states as with the worker and as ``prefetch=0``, no thread, an error met ahead raised at
its own batch, a source moved from outside followed, a filtered pass the same, and what
is set between epochs (``nnx.update``, a variable) used by the next epoch."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline, driver_compiled
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.plan import PipelinePlan
from datarax.sources import MemorySource, MemorySourceConfig


def _noise_x(e, key):
    return e.update_data({"x": e.data["x"] + jax.random.uniform(key)})


def _pipeline(prefetch: int, n: int = 50, seed: int = 5) -> Pipeline:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(n, dtype=np.float32)})
    noise = ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noise_x)
    return Pipeline(source=source, stages=[noise], batch_size=8, prefetch=prefetch,
                    rngs=nnx.Rngs(seed))


def _served(pipeline: Pipeline, epochs: int) -> list[tuple[list[float], int, int]]:
    """Each batch of ``epochs`` epochs with the (epoch, position) the pipeline reports after it."""
    return [(np.asarray(b["x"]).tolist(), pipeline.epoch, pipeline.position)
            for _ in range(epochs) for b in pipeline]


def _dispatch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "datarax-dispatch" and t.is_alive()}


@pytest.fixture(scope="module")
def reference() -> list[tuple[list[float], int, int]]:
    return _served(_pipeline(0), 2)  # every batch dispatched when asked for


@pytest.fixture
def on_loop(monkeypatch):
    monkeypatch.setattr(driver_compiled, "WORKER_BACKENDS", frozenset())


@pytest.mark.parametrize("prefetch", [1, 3])
def test_same_batches_and_states_as_prefetch_0_and_no_thread(on_loop, reference, prefetch):
    before = _dispatch_threads()
    assert _served(_pipeline(prefetch), 2) == reference
    assert _dispatch_threads() - before == set()


def test_same_batches_as_the_worker(monkeypatch, reference):
    monkeypatch.setattr(driver_compiled, "WORKER_BACKENDS", frozenset({jax.default_backend()}))
    assert _served(_pipeline(2), 2) == reference


def test_state_mid_epoch_counts_only_batches_handed_out(on_loop, reference):
    pipeline = _pipeline(3)
    it = iter(pipeline)
    head = [np.asarray(next(it)["x"]).tolist() for _ in range(2)]
    state = pipeline.get_state()  # two handed out, three more dispatched
    assert pipeline.position == 16 and pipeline.source.get_state()["current_index"] == 16
    fresh = _pipeline(3)
    fresh.set_state(state)
    rest = [np.asarray(b["x"]).tolist() for b in fresh]
    assert head + rest == [x for x, _, _ in reference[:7]]


def test_an_error_met_ahead_is_raised_by_its_own_batch(on_loop, monkeypatch, reference):
    real = IndexedDispatch.dispatch_some
    calls = []

    def third_fails(self):
        calls.append(None)
        if len(calls) == 3:
            raise RuntimeError("batch 3 is broken")
        return real(self)

    monkeypatch.setattr(IndexedDispatch, "dispatch_some", third_fails)
    pipeline = _pipeline(2)
    it = iter(pipeline)
    got = [np.asarray(next(it)["x"]).tolist() for _ in range(2)]  # the third dispatched ahead
    assert len(calls) == 3 and got == [x for x, _, _ in reference[:2]]  # met at the first next()
    with pytest.raises(RuntimeError, match="batch 3 is broken"):
        next(it)
    assert pipeline.position == 16  # nothing of the failed batch was served
    rest = [np.asarray(b["x"]).tolist() for b in pipeline]  # a retry reads it again
    assert got + rest == [x for x, _, _ in reference[:7]]


def test_source_moved_from_outside_continues_from_there(on_loop, reference):
    pipeline = _pipeline(3)
    it = iter(pipeline)
    start = pipeline.source.get_state()
    next(it), next(it)
    pipeline.source.set_state(start)  # what was dispatched ahead belongs to the old position
    assert [np.asarray(b["x"]).tolist() for b in it] == [x for x, _, _ in reference[:7]]


def test_nnx_update_between_epochs_is_used_by_the_next_epoch(on_loop, reference):
    run, other = _pipeline(2, seed=5), _pipeline(2, seed=6)
    for p in (run, other):  # both at epoch 1's start
        for _ in p:
            pass
    nnx.update(run, nnx.state(other))  # other keys
    got = _served(run, 1)
    assert got == _served(other, 1) and got != reference[7:]


def test_a_variable_set_between_epochs_is_used_by_the_next_epoch(on_loop, reference):
    run, ref = _pipeline(2), _pipeline(0)
    for p in (run, ref):  # another order from epoch 1 on, set outside any restore
        for _ in p:
            pass
        p.source.permutation_seed.set_value(np.asarray(9, np.uint32))
    got = _served(run, 1)
    assert got == _served(ref, 1) and got != reference[7:]


def test_a_filtered_pass_on_the_loops_thread(on_loop):
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(20, dtype=np.int32)})
    keep = FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)
    p = Pipeline(source=src, stages=[keep], batch_size=3, prefetch=2, seed=0)
    it = iter(p)
    assert np.asarray(next(it)["x"]).tolist() == [0, 2, 4]
    src.seek(0, 11)
    assert [np.asarray(b["x"]).tolist() for b in it] == [[12, 14, 16], [18]]
    assert (p.epoch, p.position) == (1, 0)


def test_step_backend_follows_stages_on_and_the_default_device():
    on_device = PipelinePlan(4, False, 2, False)
    assert driver_compiled.step_backend(on_device) == jax.default_backend()
    assert driver_compiled.step_backend(PipelinePlan(4, False, 2, False, stages_on="host")) == "cpu"
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        assert driver_compiled.step_backend(on_device) == "cpu"
