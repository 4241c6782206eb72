"""ShuffleBufferSource: windows of a parent's pass, each in a seeded permutation; exact
resume from the position alone at every batch boundary, a bounded replay, clear errors.

The conformance table (tests/conformance, reorder_rows.py) runs shuffle buffers over a
stream, a mixture, ArrayRecord files and a Hugging Face stream through every contract
clause; these tests pin the order against a plain-Python reference, and the messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, SourceContractError, StateError
from datarax.core.stream import StreamSource
from datarax.pipeline import Pipeline
from datarax.samplers.shard_window import permute, window_seed
from datarax.sources import (
    MemorySource,
    MemorySourceConfig,
    ShuffleBufferSource,
)

from number_sources import NumberStream, numbers
from source_reads import check_resumes_at_every_batch, flat, read_all, xs


def reference(parent_order: list[int], buffer_size: int, seed: int, epoch: int) -> list[int]:
    """The documented order, in plain Python: windows of ``buffer_size`` consecutive
    records, window ``w`` served as ``window[perm[k]]``, ``perm`` the Feistel permutation
    keyed by ``window_seed((seed + epoch) % 2**32, w)``."""
    out: list[int] = []
    for w, start in enumerate(range(0, len(parent_order), buffer_size)):
        window = parent_order[start:start + buffer_size]
        perm = permute(np.arange(len(window)), len(window), window_seed((seed + epoch) % 2**32, w))
        out += [window[k] for k in perm.tolist()]
    return out


def generated(n: int, **kwargs: Any) -> NumberStream:
    """A forward-only stream of ``0 .. n-1``, ``100 * epoch`` added."""
    return NumberStream(0, n, epoch_step=100, **kwargs)


@pytest.mark.parametrize("n, buffer_size, seed", [(10, 4, 0), (23, 5, 7), (8, 8, 1), (6, 50, 2),
                                                  (9, 1, 3)])
def test_the_order_is_each_window_in_its_seeded_permutation(n, buffer_size, seed):
    for epoch in range(2):
        source = ShuffleBufferSource(generated(n), buffer_size=buffer_size, seed=seed)
        source.seek(epoch, 0)
        parent = list(range(100 * epoch, 100 * epoch + n))
        assert flat(read_all(source, 3)) == reference(parent, buffer_size, seed, epoch)


def test_it_shuffles_an_indexed_parents_own_order_and_keeps_its_stable_indices():
    parent_order = xs(numbers(0, 12, shuffle=True, seed=5).get_batch_at(0, 12))
    source = ShuffleBufferSource(numbers(0, 12, shuffle=True, seed=5), buffer_size=5, seed=9)
    batch, stable = source.get_batch_with_indices(12)
    assert batch["x"].tolist() == reference(parent_order, 5, 9, 0)
    assert stable.tolist() == batch["x"].tolist()  # the parent's stable index: the record's number
    assert batch["x"].tolist() != parent_order  # it did reorder


def test_a_buffer_of_one_serves_the_parent_order_and_seeds_and_passes_differ():
    assert flat(read_all(ShuffleBufferSource(generated(7), buffer_size=1), 3)) == list(range(7))
    a = flat(read_all(ShuffleBufferSource(generated(20), buffer_size=20, seed=1), 20))
    b = flat(read_all(ShuffleBufferSource(generated(20), buffer_size=20, seed=2), 20))
    assert sorted(a) == sorted(b) == list(range(20)) and a != b


def build() -> ShuffleBufferSource:
    return ShuffleBufferSource(generated(17), buffer_size=5, seed=4, num_epochs=-1)


@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_a_state_saved_at_any_batch_boundary_resumes_exactly_from_the_position_alone(batch_size):
    def position_only(state: dict, before: list) -> None:
        assert set(state) == {"current_index", "current_epoch", "settings"}

    check_resumes_at_every_batch(build, batch_size, check_state=position_only)


def test_a_restore_replays_the_stream_only_up_to_the_end_of_one_read_of_the_window():
    source = build()
    source.set_state({"current_epoch": 0, "current_index": 12})  # window 2: records 10 .. 14
    source.get_batch_with_indices(1)
    # the stream reads again up to the window's start (10), then reads the window (one
    # read of at most max(buffer_size, 64) records: here the 7 left)
    assert source.source.served == 17
    assert flat(read_all(source, 5)) == reference(list(range(17)), 5, 4, 0)[13:]


def test_nnx_state_restores_it_under_a_pipeline_across_epochs():
    def pipeline():
        return Pipeline(source=build(), stages=[], batch_size=4, rngs=nnx.Rngs(0))

    def two_epochs(p):
        return [np.asarray(b["x"]).tolist() for _ in range(2) for b in p]

    expected = two_epochs(pipeline())
    assert flat(expected[:5]) == reference(list(range(17)), 5, 4, 0)
    assert flat(expected[5:]) == reference(list(range(100, 117)), 5, 4, 1)
    for cut in (1, 3, 5, 7):
        old = pipeline()
        iterator = iter(old)
        for _ in range(cut if cut < 5 else 5):
            next(iterator, None)
        if cut >= 5:
            next(iterator, None)  # the end of epoch 0
            iterator = iter(old)
            for _ in range(cut - 5):
                next(iterator)
        fresh = pipeline()
        nnx.update(fresh, nnx.state(old))
        rest = [np.asarray(b["x"]).tolist() for b in fresh]
        done = expected[:cut] if cut < 5 else expected[5:cut]
        assert flat(done) + flat(rest) == flat(expected[:5] if cut < 5 else expected[5:])


def test_each_shard_keeps_its_record_of_every_whole_round():
    order = reference(list(range(17)), 5, 4, 0)
    for index in range(3):
        source = build()
        source.set_shard(index, 3)
        assert flat(read_all(source, 2)) == order[index: 15: 3]


def test_text_fields_follow_their_records():
    x = np.arange(6, dtype=np.int32)
    parent = MemorySource(MemorySourceConfig(), {"x": x, "t": np.asarray([f"r{i}" for i in x])})
    batch, _ = ShuffleBufferSource(parent, buffer_size=4, seed=1).get_batch_with_indices(6)
    assert batch["t"] == [f"r{i}" for i in batch["x"].tolist()]


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, message", [
    ({"buffer_size": 0}, "ShuffleBufferSourceConfig.buffer_size must be >= 1, got 0."),
    ({"buffer_size": 2.0}, "ShuffleBufferSourceConfig.buffer_size must be an int, got float 2.0."),
    ({"buffer_size": 4, "seed": -1}, "ShuffleBufferSourceConfig.seed must be >= 0, got -1."),
])
def test_bad_buffer_sizes_and_seeds_are_refused(kwargs, message):
    with pytest.raises(ConfigError) as err:
        ShuffleBufferSource(numbers(0, 4), **kwargs)
    assert str(err.value) == message


def test_a_parent_that_cannot_be_shuffled_is_refused_naming_it():
    with pytest.raises(SourceContractError, match="source is list, not a data source"):
        ShuffleBufferSource([1, 2], buffer_size=2)  # type: ignore[arg-type]
    sharded = numbers(0, 4)
    sharded.set_shard(1, 2)
    with pytest.raises(SourceContractError, match="source is sharded .* shard the shuffled source"):
        ShuffleBufferSource(sharded, buffer_size=2)


def test_a_state_of_another_buffer_or_past_the_pass_is_refused():
    source = build()
    source.get_batch_with_indices(3)
    state = source.get_state()
    with pytest.raises(StateError, match="buffer_size"):
        ShuffleBufferSource(generated(17), buffer_size=6, seed=4).set_state(state)
    late = build()
    late.set_state({"current_epoch": 0, "current_index": 30})
    with pytest.raises(StateError, match="says 30 records of pass 0 were handed out") as err:
        late.get_batch_with_indices(1)
    assert err.value.field == "current_index"


@pytest.mark.parametrize("n, buffer_size", [(8, 4), (10, 4), (5, 2)])
def test_a_position_past_an_in_memory_parents_pass_is_refused_and_its_end_is_not(n, buffer_size):
    # a window past the pass's end read empty: it was taken for the pass's end, at any
    # position (a memory parent, unlike a stream, never says it ended early)
    def at(index: int) -> ShuffleBufferSource:
        source = ShuffleBufferSource(numbers(0, n), buffer_size=buffer_size, seed=1)
        source.seek(0, index)
        return source

    assert at(n).get_batch_with_indices(3) == (None, None)
    assert sorted(flat(read_all(at(n - 1), 3)) + flat(read_all(at(0), 3))[: n - 1]) == [
        *range(n)]
    for index in (n + 1, 2 * n, 100 * buffer_size):
        with pytest.raises(StateError, match=f"says {index} records of pass 0 were handed out"):
            at(index).get_batch_with_indices(3)


@pytest.fixture(scope="module")
def int_files(tmp_path_factory):
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import write_int_parts

    return write_int_parts(tmp_path_factory.mktemp("shuffle_ar"), (5, 9, 14))


def file_parent(paths: list[str]) -> Any:
    from int_record_files import int_source

    return int_source(paths, seed=5, shuffle_files=True, num_threads=2)


def mixture_parent() -> Any:
    from datarax.mixing import MixSource

    return MixSource([numbers(0, 6, shuffle=True, seed=5), generated(5)], weights=[6, 5], seed=3,
                     records_per_epoch=11)


def parent_order(parent: Any, epoch: int) -> list[int]:
    parent.seek(epoch, 0)
    return flat(read_all(parent, 4))


@pytest.mark.parametrize("parent", ["files", "mixture"])
def test_over_files_or_a_mixture_the_order_is_the_reference_and_resumes_everywhere(parent,
                                                                                   request):
    if parent == "files":
        paths = request.getfixturevalue("int_files")
        build_parent = lambda: file_parent(paths)  # noqa: E731
    else:
        build_parent = mixture_parent

    def build() -> ShuffleBufferSource:
        return ShuffleBufferSource(build_parent(), buffer_size=4, seed=8)

    source = build()
    for epoch in range(2):
        source.seek(epoch, 0)
        order = parent_order(build_parent(), epoch)
        assert flat(read_all(source, 3)) == reference(order, 4, 8, epoch)
    check_resumes_at_every_batch(build, 3)


def test_a_read_that_fails_is_read_again_from_the_last_batch_handed_out():
    source = ShuffleBufferSource(generated(14, most_per_read=3, fail_on_read=3), buffer_size=4,
                                 seed=2)
    served = []
    with pytest.raises(OSError, match="the disk hiccuped"):
        while True:
            served.append(np.asarray(source.get_batch_with_indices(8)[0]["x"]).tolist())
    served += read_all(source, 3)  # the retry
    assert flat(served) == reference(list(range(14)), 4, 2, 0)


class OnePass(NumberStream):
    """``0 .. n-1`` once: a stream without ``restart``."""

    restart = StreamSource.restart

    def __init__(self, n: int) -> None:
        super().__init__(0, n)
        NumberStream.restart(self, 0)


def test_a_loop_after_a_break_over_a_stream_without_restart_says_the_stream_was_read_ahead():
    source = ShuffleBufferSource(OnePass(64), buffer_size=8, seed=0)
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0),
                        shard_index=0, shard_count=1)
    for _ in pipeline:
        break  # the buffer read all 64 records (one read), the stream never said its end
    with pytest.raises(SourceContractError) as caught:
        next(iter(pipeline))  # the next pass: pass 1
    assert str(caught.value).startswith(
        "OnePass cannot begin pass 1: it stands inside pass 0, 64 records read, and does not "
        "implement restart(self, epoch), so pass 1 would serve the rest of pass 0. Pass 0 was "
        "left before the stream returned its end (a `for` after a `break` or a take() starts "
        "the next pass; a wrapper such as ShuffleBufferSource reads ahead of the batches "
        "handed out). Implement restart(self, epoch)")
