"""Pipeline.peek(): the batch the next ``for`` loop starts with, position untouched."""

import numpy as np
from flax import nnx

from datarax.core.stream import StreamSource, StructuralConfig
from datarax.core.spec import array_to_spec_strip_leading
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def make(n=10, batch_size=4, shuffle=True):
    source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=3),
                          {"x": np.arange(n, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))


def xs(batch):
    return np.asarray(batch["x"]).tolist()


def test_peek_on_a_new_pipeline_is_the_first_batch_of_the_first_loop():
    pipeline = make()
    peeked = xs(pipeline.peek())
    assert (pipeline.epoch, pipeline.position) == (0, 0)
    assert xs(next(iter(pipeline))) == peeked


def test_peek_after_a_break_is_the_next_epochs_first_batch():
    pipeline = make()
    for _ in iter(pipeline):
        break
    assert (pipeline.epoch, pipeline.position) == (0, 4)
    peeked = xs(pipeline.peek())
    assert (pipeline.epoch, pipeline.position) == (0, 4)  # untouched
    iterator = iter(pipeline)
    assert iterator.epoch == 1
    assert xs(next(iterator)) == peeked


def test_peek_after_step_is_the_next_loops_batch_and_step_goes_on_with_its_pass():
    stepped, looped = make(), make()
    first = xs(stepped.step())
    peeked = xs(stepped.peek())
    epochs = [[xs(b) for b in looped] for _ in range(2)]
    assert first == epochs[0][0] and peeked == epochs[1][0]  # the next pass's first
    assert xs(stepped.step()) == epochs[0][1]  # step() goes on with the live pass
    assert (stepped.epoch, stepped.position) == (0, 8)


def test_peek_after_a_restore_is_the_batch_the_restore_continues_with():
    reference = make()
    iterator = iter(reference)
    next(iterator)
    state = reference.get_state()
    expected = xs(next(iterator))
    restored = make()
    restored.set_state(state)
    assert xs(restored.peek()) == expected
    assert xs(next(iter(restored))) == expected


def test_peek_after_a_whole_pass_is_the_next_epoch():
    pipeline = make()
    first_epoch = [v for b in pipeline for v in xs(b)]
    assert sorted(first_epoch) == list(range(10))
    peeked = xs(pipeline.peek())
    assert xs(next(iter(pipeline))) == peeked


class Empty(StreamSource):
    """A stream with no records (an empty file, a filter that keeps nothing)."""

    def __init__(self):
        super().__init__(StructuralConfig())

    def get_batch(self, batch_size):
        return None

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros(1, np.int32))}


def test_an_empty_stream_gives_empty_epochs_that_still_advance():
    pipeline = Pipeline(source=Empty(), stages=[], batch_size=2)
    epochs = []
    for _ in range(3):
        iterator = iter(pipeline)
        epochs.append((iterator.epoch, len(list(iterator))))
    assert epochs == [(0, 0), (1, 0), (2, 0)]


def test_a_peeked_batch_is_counted_once_in_stats_when_the_loop_hands_it_out():
    from datarax.operators import FilterOperator

    for stages in ([], [FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)]):
        pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), {"x": np.arange(10)}),
                            stages=stages, batch_size=4, seed=0)
        pipeline.peek()
        served = [xs(b) for b in pipeline]
        stats = pipeline.stats()
        assert (stats["batches"], stats["records"]) == (len(served), sum(map(len, served)))
        if stages:
            assert stats["filter"] == {"kept": 5, "dropped": 5}
