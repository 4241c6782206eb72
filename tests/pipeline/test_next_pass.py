"""The next epoch's pass started before the loop asks for it (``pipeline/next_pass.py``),
on the loop's-thread path (the TPU and GPU one; ``WORKER_BACKENDS`` emptied to run it on
the CPU): the same batches and states over several epochs as without it, dropped when a
restore, ``nnx.update`` or a move of the source comes between epochs, nothing of it
counted in a state, and nothing left behind once the pipeline is dropped."""

from __future__ import annotations

import gc
import threading
import weakref

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline, driver_compiled
from datarax.pipeline.pass_reuse import PassReuse
from datarax.sources import MemorySource, MemorySourceConfig

EPOCHS = 3
BATCHES = 7  # 50 records in batches of 8: the last one short


def _noise_x(e, key):
    return e.update_data({"x": e.data["x"] + jax.random.uniform(key)})


def _pipeline(prefetch: int = 2, seed: int = 5) -> Pipeline:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(50, dtype=np.float32)})
    noise = ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noise_x)
    return Pipeline(source=source, stages=[noise], batch_size=8, prefetch=prefetch,
                    rngs=nnx.Rngs(seed))


def _epoch(pipeline: Pipeline) -> list[tuple[list[float], int, int]]:
    """One epoch's batches, each with the (epoch, position) reported after it."""
    return [(np.asarray(b["x"]).tolist(), pipeline.epoch, pipeline.position) for b in pipeline]


@pytest.fixture(scope="module")
def reference() -> list[list[tuple[list[float], int, int]]]:
    run = _pipeline(prefetch=0)  # every batch dispatched when asked for: nothing ahead
    return [_epoch(run) for _ in range(EPOCHS)]


@pytest.fixture
def taken(monkeypatch) -> list[bool]:
    """On the loop's thread, the next pass started ahead (off by default); per pass
    opened there with ``prefetch`` > 0, whether it took a pass started ahead."""
    monkeypatch.setattr(driver_compiled, "WORKER_BACKENDS", frozenset())
    monkeypatch.setattr(driver_compiled.CompiledDriver, "next_pass_ahead", True)
    seen: list[bool] = []
    real = driver_compiled.take_next_pass

    def spy(context, epoch):
        ready = real(context, epoch)
        seen.append(ready is not None)
        return ready

    monkeypatch.setattr(driver_compiled, "take_next_pass", spy)
    return seen


@pytest.mark.parametrize("ahead", [True, False])
def test_epochs_are_the_same_with_and_without_the_next_pass_started_ahead(
        taken, reference, monkeypatch, ahead):
    monkeypatch.setattr(driver_compiled.CompiledDriver, "next_pass_ahead", ahead)
    run = _pipeline()
    assert [_epoch(run) for _ in range(EPOCHS)] == reference
    assert taken == ([False] + [True] * (EPOCHS - 1) if ahead else [])


def test_a_state_never_counts_the_next_passs_batches(taken, reference):
    run = _pipeline()
    it = iter(run)
    for _ in range(BATCHES):  # every batch handed out; the next pass started, not read
        next(it)
    assert (run.epoch, run.position) == (0, 50)
    mid = run.get_state()
    assert mid["source"]["current_epoch"] == 0 and mid["source"]["current_index"] == 50
    with pytest.raises(StopIteration):
        next(it)
    boundary = run.get_state()
    ref = _pipeline(prefetch=0)
    _epoch(ref)
    assert boundary == ref.get_state()
    fresh = _pipeline()
    fresh.set_state(boundary)
    assert _epoch(fresh) == reference[1]
    assert _epoch(run) == reference[1]
    assert taken == [False, False, True]  # run, fresh, then run's epoch 1


def test_a_restore_between_epochs_drops_it(taken, reference):
    run = _pipeline()
    it = iter(run)
    for _ in range(3):
        next(it)
    saved = run.get_state()  # three batches into epoch 0
    for _ in it:
        pass
    run.set_state(saved)
    assert _epoch(run) == reference[0][3:]
    assert _epoch(run) == reference[1]
    assert taken[:2] == [False, False]  # the restored pass built anew


def test_a_move_of_the_source_between_epochs_drops_it(taken, reference):
    run = _pipeline()
    _epoch(run)
    run.source.seek(1, 16)  # read from outside: two batches of epoch 1 gone
    assert [x for x, _, _ in _epoch(run)] == [x for x, _, _ in reference[1][2:]]
    assert taken == [False, False]


def test_nnx_update_between_epochs_drops_it(taken, reference):
    run, other = _pipeline(seed=5), _pipeline(seed=6)
    _epoch(run), _epoch(other)  # both at epoch 1's start; run's next pass started ahead
    nnx.update(run, nnx.state(other))  # other keys
    got = _epoch(run)
    assert got == _epoch(other)
    assert got != reference[1]  # what the pass started ahead with run's own keys serves
    assert taken == [False, False, False, True]


def test_a_dropped_pipeline_leaves_no_thread_and_frees_the_next_pass(taken, monkeypatch):
    parked: list[weakref.ref] = []
    real = PassReuse.park_next
    monkeypatch.setattr(PassReuse, "park_next",
                        lambda self, ready: (parked.append(weakref.ref(ready)), real(self, ready)))
    before = set(threading.enumerate())
    run = _pipeline()
    _epoch(run)
    assert len(parked) == 1 and parked[0]() is not None  # started, waiting
    assert {t for t in set(threading.enumerate()) - before if t.name.startswith("datarax")} == set()
    gone = weakref.ref(run)
    del run
    gc.collect()
    assert gone() is None and parked[0]() is None


def test_a_variable_set_between_epochs_drops_it(taken, reference):
    run, ref = _pipeline(), _pipeline(prefetch=0)
    _epoch(run), _epoch(ref)
    for p in (run, ref):  # another order from epoch 1 on, set outside any restore
        p.source.permutation_seed.set_value(np.asarray(9, np.uint32))
    got = _epoch(run)
    assert got == _epoch(ref) and got != reference[1]
    assert taken == [False, False]  # run's epochs 0 and 1
