"""Indexed batches prepared on the dispatch thread: same batches, errors in place,
the consumer's JAX settings honoured, the thread released."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.pipeline.ahead import DispatchAhead
from datarax.sources import MemorySource, MemorySourceConfig


def _dispatch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "datarax-dispatch" and t.is_alive()]


def _pipeline(prefetch: int, n: int = 50) -> Pipeline:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(n, dtype=np.float32)})
    noise = ElementOperator(
        ElementOperatorConfig(stochastic=True),
        fn=_noise_x,
    )
    return Pipeline(source=source, stages=[noise], batch_size=8, prefetch=prefetch,
                    rngs=nnx.Rngs(5))


# module-level stage functions: the pipelines a test builds share one compiled step
def _noise_x(e, key):
    return e.update_data({"x": e.data["x"] + jax.random.uniform(key)})


def _noise_image(e, key):
    return e.update_data({**e.data, "image": e.data["image"] + jax.random.uniform(key)})


def _epochs(pipeline: Pipeline, count: int) -> list[list[float]]:
    return [np.asarray(b["x"]).tolist() for _ in range(count) for b in pipeline]


@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_prefetched_batches_equal_on_demand_batches(prefetch: int) -> None:
    # prefetch=0 dispatches each batch on the consumer's thread when asked for
    assert _epochs(_pipeline(prefetch), 2) == _epochs(_pipeline(0), 2)


def test_resume_mid_epoch_with_batches_dispatched_ahead() -> None:
    pipeline = _pipeline(3)
    it = iter(pipeline)
    head = [np.asarray(next(it)["x"]).tolist() for _ in range(2)]
    state = pipeline.get_state()  # two batches handed out, up to three more dispatched
    assert pipeline.position == 16 and pipeline.source.get_state()["current_index"] == 16
    rest = [np.asarray(b["x"]).tolist() for b in it]
    fresh = _pipeline(3)
    fresh.set_state(state)
    assert [np.asarray(b["x"]).tolist() for b in fresh] == rest
    assert head + rest == _epochs(_pipeline(0), 1)


def test_dispatch_thread_released_at_pass_end_close_and_drop(monkeypatch) -> None:
    from datarax.pipeline import ahead

    # the ended pass's worker parks for the next pass: never ending by itself mid-test
    # (at 1 s, a loaded machine's loop may come back as it ends: two alive for a moment)
    monkeypatch.setattr(ahead, "PARK_SECONDS", 60.0)
    before = set(_dispatch_threads())  # an earlier test's iterator may await collection

    def started() -> list[threading.Thread]:
        return [t for t in _dispatch_threads() if t not in before]

    pipeline = _pipeline(2)
    for _ in pipeline:
        pass
    assert len(started()) <= 1  # the ended pass's worker waits for the next pass
    it = iter(pipeline)
    next(it)
    assert len(started()) == 1  # that one, never a second
    it.close()
    assert started() == []
    it = iter(pipeline)
    next(it)
    del it  # a dropped iterator releases its thread
    assert started() == []


def test_one_worker_serves_epoch_after_epoch_and_ends_when_no_pass_follows(monkeypatch) -> None:
    from datarax.pipeline import ahead

    before = set(_dispatch_threads())
    pipeline = _pipeline(2)
    seen = []
    epochs = []
    for epoch in range(3):
        # a worker parks PARK_SECONDS for the next pass: on a loaded machine the loop may
        # take longer than the default 1 s to come back, and a second worker would start
        monkeypatch.setattr(ahead, "PARK_SECONDS", 60.0 if epoch < 2 else 1.0)
        epochs.append([])
        for batch in pipeline:
            if not epochs[-1]:  # mid-pass: the pass's worker is alive
                seen.append([t for t in _dispatch_threads() if t not in before])
            epochs[-1].append(np.asarray(batch["x"]).tolist())
    assert sum(epochs, []) == _epochs(_pipeline(0), 3)  # the batches made without a worker
    assert all(len(s) == 1 for s in seen) and seen[0] == seen[1] == seen[2]
    seen[0][0].join(timeout=30)  # no next pass: it ends by itself
    assert not seen[0][0].is_alive()


def test_batches_follow_the_consumers_jax_settings() -> None:
    # enable_x64 is a per-thread setting: the dispatch thread must trace with the consumer's
    def with_count(element, key=None):
        return element.update_data({**element.data, "n": jnp.arange(2)})

    with jax.enable_x64(True):
        source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int64) + 2**40})
        pipeline = Pipeline(source=source, batch_size=4,
                            stages=[ElementOperator(ElementOperatorConfig(), fn=with_count)])
        batch = next(iter(pipeline))
        assert batch["n"].dtype == np.int64
        assert np.asarray(batch["x"]).tolist() == (np.arange(4) + 2**40).tolist()


def test_errors_arrive_after_the_items_made_before_them() -> None:
    made = iter([[1], [2]])

    def produce() -> list[int] | None:
        try:
            return next(made)
        except StopIteration:
            raise RuntimeError("record 3 is broken") from None

    ahead = DispatchAhead(produce, depth=4)
    got = []
    for _ in range(2):
        got.append(ahead.get())
        ahead.resume()
    assert got == [1, 2]
    with pytest.raises(RuntimeError, match="record 3 is broken"):
        ahead.get()
    ahead.stop()


def test_worker_keeps_at_most_depth_items_ready() -> None:
    calls = []

    def produce() -> list[int]:
        calls.append(len(calls))
        return [len(calls)]

    ahead = DispatchAhead(produce, depth=3)
    assert ahead.get() == 1
    ahead.stop()
    assert len(calls) <= 4  # three ready plus the one it may have been making
    with pytest.raises(ValueError, match="depth must be >= 1"):
        DispatchAhead(produce, depth=0)


@pytest.mark.parametrize("seed", range(6))
def test_items_errors_and_stops_hold_under_random_timing(seed: int) -> None:
    """The hand-out is lock-free on the consumer's side: under producer and consumer
    delays drawn at random, items come out in order, none lost or repeated, an error
    after exactly the items made before its call, ``stop()`` ends the worker, and the
    worker's queue of wake-ups stays bounded."""
    import random
    import time

    rng = random.Random(seed)
    before = set(_dispatch_threads())  # an earlier test's iterator may await collection
    for _ in range(25):
        count, depth = rng.randint(0, 30), rng.randint(1, 4)
        per_call = rng.choice([1, 1, 3])  # several items from one produce() call
        fail_at = rng.randint(0, 40) if rng.random() < 0.3 else None
        stop_after = rng.randint(0, count) if rng.random() < 0.2 else None
        values = iter(range(count))

        def produce() -> list[int] | None:
            if rng.random() < 0.3:
                time.sleep(rng.random() / 2000)
            items: list[int] = []
            for _ in range(rng.randint(1, per_call)):
                value = next(values, None)
                if value is None:
                    break
                if value == fail_at:
                    raise ValueError(items[0] if items else value)  # where this call began
                items.append(value)
            return items or None

        ahead = DispatchAhead(produce, depth)
        got: list[int] = []
        failed_at = None
        try:
            while stop_after is None or len(got) < stop_after:
                item = ahead.get()
                if item is None:
                    break
                got.append(item)
                if rng.random() < 0.3:
                    time.sleep(rng.random() / 2000)
                ahead.resume()
                assert ahead._wake.qsize() <= len(got) + 1
        except ValueError as err:
            failed_at = err.args[0]
        ahead.stop()
        if failed_at is not None:
            assert got == list(range(failed_at))
        elif stop_after is not None:
            assert got == list(range(len(got))) and len(got) == min(stop_after, count)
        else:
            assert got == list(range(count))
    assert not [t for t in _dispatch_threads() if t not in before]


def _mixed(n: int = 200, batch_size: int = 8) -> Pipeline:
    """Small batches with a per-record stochastic stage and a batch-level mix."""
    from datarax.operators import BatchMixOperator

    source = MemorySource(
        MemorySourceConfig(shuffle=True, seed=1),
        {"image": np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2, 1),
         "label": np.arange(n, dtype=np.int32) % 3},
    )
    noise = ElementOperator(
        ElementOperatorConfig(stochastic=True),
        fn=_noise_image,
    )
    mix = BatchMixOperator(mode="mixup", alpha=0.4, data_field="image", label_field="label",
                           num_classes=3)
    return Pipeline(source=source, stages=[noise, mix], batch_size=batch_size,
                    rngs=nnx.Rngs(2))


def _values(pipeline: Pipeline) -> list[tuple[list, list]]:
    return [(np.asarray(b["image"]).tolist(), np.asarray(b["label"]).tolist()) for b in pipeline]


@pytest.fixture
def group_short_passes(monkeypatch):
    from datarax.pipeline import dispatch

    monkeypatch.setattr(dispatch, "GROUP_MIN_BATCHES", 1)  # group passes of any length


@pytest.mark.slow
def test_small_batches_computed_several_per_dispatch_equal_one_by_one(
    monkeypatch, group_short_passes
) -> None:
    from datarax.pipeline import dispatch

    assert dispatch.group_size(8) == 16  # 25 batches of 8: one group of 16, then 9 in the next
    grouped = [_values(p) for p in [_mixed()] for _ in range(2)]
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)  # one batch per dispatch
    assert dispatch.group_size(8) == 1
    single = [_values(p) for p in [_mixed()] for _ in range(2)]
    assert grouped == single
    assert len(grouped[0]) == 25 and grouped[0] != grouped[1]  # two epochs, reshuffled


def test_resume_inside_a_group_of_small_batches(group_short_passes) -> None:
    pipeline = _mixed()
    it = iter(pipeline)
    head = [next(it) for _ in range(3)]  # three of a group of sixteen handed out
    state = pipeline.get_state()
    rest = [(np.asarray(b["image"]).tolist(), np.asarray(b["label"]).tolist()) for b in it]
    fresh = _mixed()
    fresh.set_state(state)
    assert _values(fresh) == rest and len(rest) == 22 and len(head) == 3


def test_source_restored_mid_pass_the_live_iterator_continues_from_there() -> None:
    import copy

    pipeline = _pipeline(3)
    source = pipeline.source
    it = iter(pipeline)
    start = source.get_state()
    first = np.asarray(next(it)["x"]).tolist()
    snapshot = copy.deepcopy(nnx.state(pipeline))
    second = np.asarray(next(it)["x"]).tolist()
    next(it)
    source.set_state(start)  # batches dispatched ahead belong to the old position
    assert np.asarray(next(it)["x"]).tolist() == first
    assert source.get_state()["current_index"] == 8
    nnx.update(pipeline, snapshot)
    assert np.asarray(next(it)["x"]).tolist() == second
    assert pipeline.position == 16


def test_last_group_with_a_short_batch_equals_one_by_one(monkeypatch, group_short_passes) -> None:
    from datarax.pipeline import dispatch

    grouped = _epochs(_pipeline(2, n=50), 2)  # 6 batches of 8 and one of 2: one group
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)
    single = _epochs(_pipeline(2, n=50), 2)
    assert grouped == single
    assert [len(b) for b in grouped[:7]] == [8] * 6 + [2]


def test_narrow_records_grouped_by_bytes_equal_one_by_one(monkeypatch, group_short_passes) -> None:
    from datarax.pipeline import dispatch

    def run() -> list[list[float]]:
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                              {"x": np.arange(700, dtype=np.float32)})
        return [np.asarray(b["x"]).tolist() for b in Pipeline(source, [], batch_size=128)]

    assert dispatch.record_bytes(MemorySource(MemorySourceConfig(), {"x": np.zeros(3, np.float32)})) == 4
    assert dispatch.group_size(128, 4) == 16  # 128-record batches of 4-byte records
    grouped = run()  # 5 batches of 128 and one of 60, in one dispatch
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)
    assert grouped == run()
    assert [len(b) for b in grouped] == [128] * 5 + [60]
    assert sorted(v for b in grouped for v in b) == list(range(700))


def test_group_with_a_stage_vmap_cannot_batch_runs_one_after_the_other(
    monkeypatch, group_short_passes
) -> None:
    from datarax.core.config import StructuralConfig
    from datarax.core.operator import OperatorModule
    from datarax.pipeline import dispatch

    class HostDouble(OperatorModule):  # a host callback without a vmap rule
        per_record = True  # (per-record stages are the ones grouped side by side)

        def apply_batch(self, data, keys):
            x = data["x"]
            doubled = jax.pure_callback(lambda a: np.asarray(a) * 2,
                                        jax.ShapeDtypeStruct(x.shape, x.dtype), x)
            return {**data, "x": doubled}

    def run() -> list[list[float]]:
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=6),
                              {"x": np.arange(40, dtype=np.float32)})
        return [np.asarray(b["x"]).tolist()
                for b in Pipeline(source, [HostDouble(StructuralConfig())], batch_size=8)]

    grouped = run()  # vmap raises on the first group: the loop computes it
    assert len(dispatch._NOT_VECTORIZED) >= 1
    monkeypatch.setattr(dispatch, "MAX_GROUP", 1)
    assert grouped == run()
    assert sorted(v for b in grouped for v in b) == [2.0 * i for i in range(40)]


def test_worker_does_not_hold_an_item_the_consumer_dropped() -> None:
    # A batch the loop has dropped is freed while the next one is being made: the
    # worker keeps no reference to what it handed over (memory, and on the CPU a
    # warm allocation for the next batch).
    import gc
    import weakref

    class Item:  # a stand-in for a batch
        pass

    made: list[weakref.ref[Item]] = []
    alive_while_making: list[bool] = []
    dropped = threading.Semaphore(0)

    def produce() -> list[Item] | None:
        if made:
            assert dropped.acquire(timeout=60)  # the loop dropped the last item
            if made[-1]() is not None:  # a full collection only if needed (slow in a big process)
                gc.collect()
            alive_while_making.append(made[-1]() is not None)
        if len(made) == 3:
            return None
        item = Item()
        made.append(weakref.ref(item))
        return [item]

    ahead = DispatchAhead(produce, depth=1)
    try:
        for _ in range(3):
            item = ahead.get()
            assert isinstance(item, Item)
            del item  # the loop is done with it before asking for the next
            dropped.release()
            ahead.resume()
        assert ahead.get() is None
    finally:
        ahead.stop()
    assert alive_while_making == [False, False, False]
