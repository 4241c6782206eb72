"""An iterator of a restored pass that hands out no batch (made and dropped, closed, or
superseded by a newer ``iter(pipeline)``) passes nothing over: the next loop continues
the restored epoch, as a ``break`` before any batch restarts an unrestored one. (The
next loop went on to the next epoch, dropping the rest of the restored one.)"""

from __future__ import annotations

import numpy as np
import pytest

from datarax.pipeline import Pipeline

from number_sources import NumberStream, numbers


def build(kind: str) -> Pipeline:
    source = numbers(0, 20, shuffle=True, seed=3) if kind == "memory" else NumberStream(0, 20)
    return Pipeline(source=source, stages=[], batch_size=4)


def values(batches) -> list[list[int]]:
    return [np.asarray(b["x"]).tolist() for b in batches]


def saved_after_two_batches(kind: str) -> tuple[dict, list[list[int]]]:
    iterator = iter(build(kind))
    next(iterator), next(iterator)
    return iterator.get_state(), values(iterator)


@pytest.mark.parametrize("kind", ["memory", "stream"])
@pytest.mark.parametrize("unused", ["dropped", "closed"])
def test_a_restored_pass_left_unused_is_continued_by_the_next_loop(kind, unused):
    state, rest = saved_after_two_batches(kind)
    pipeline = build(kind)
    pipeline.set_state(state)
    iterator = iter(pipeline)
    if unused == "closed":
        iterator.close()
    del iterator
    assert values(pipeline) == rest
    assert (pipeline.epoch, pipeline.position) == (1, 0)


@pytest.mark.parametrize("kind", ["memory", "stream"])
def test_an_iterator_restored_then_superseded_leaves_the_rest_to_the_newer_one(kind):
    state, rest = saved_after_two_batches(kind)
    pipeline = build(kind)
    restored = iter(pipeline)
    restored.set_state(state)
    assert values(iter(pipeline)) == rest


def test_a_restored_pass_that_served_a_batch_then_broke_ends_as_any_break():
    state, rest = saved_after_two_batches("memory")
    pipeline = build("memory")
    pipeline.set_state(state)
    assert values([next(iter(pipeline))]) == rest[:1]
    assert pipeline.get_state()["epoch"] == 0
    next_loop = iter(pipeline)
    assert next_loop.epoch == 1 and len(next_loop) == 5


@pytest.mark.parametrize("kind", ["memory", "stream"])
def test_batches_skipped_count_as_handed_out_so_an_unused_skip_ends_its_pass(kind):
    pipeline = build(kind)
    skipped = pipeline.skip(2)  # a seek (memory) or two batches read and dropped (stream)
    del skipped
    assert iter(pipeline).epoch == 1
