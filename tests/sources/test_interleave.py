"""InterleaveSource: tf.data's cycle / block order over children of every kind, exact
resume from its cursor at every batch boundary, clear errors.

The conformance table (tests/conformance, reorder_rows.py) runs interleaves over memory,
host, ArrayRecord, Hugging Face stream and mixture children through every contract
clause; these tests pin the order against a plain-Python reference, and the messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, SourceContractError, SpecMismatchError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    InterleaveSource,
    MemorySource,
    MemorySourceConfig,
    ShuffleBufferSource,
)

from number_sources import NumberStream, numbers
from source_reads import check_resumes_at_every_batch, flat, read_all


def reference(children: list[list[int]], cycle_length: int, block_length: int) -> list[int]:
    """tf.data's interleave order (its documented semantics), in plain Python."""
    slots: list[Any] = [None] * cycle_length
    pending = iter(children)
    exhausted_input = False
    slot = taken = 0
    out: list[int] = []
    while not exhausted_input or any(s is not None for s in slots):
        if slots[slot] is None and not exhausted_input:
            child = next(pending, None)
            if child is None:
                exhausted_input = True
            else:
                slots[slot] = iter(child)
            continue
        if slots[slot] is not None:
            value = next(slots[slot], None)
            if value is not None:
                out.append(value)
                taken += 1
                if taken == block_length:
                    slot, taken = (slot + 1) % cycle_length, 0
                continue
            slots[slot] = None
        slot, taken = (slot + 1) % cycle_length, 0
    return out


def generated(lo: int, hi: int, **kwargs: Any) -> NumberStream:
    """A forward-only stream of ``lo .. hi - 1``, reversed on odd passes."""
    return NumberStream(lo, hi, reverse_odd_passes=True, **kwargs)


def own_order(child: Any, epoch: int = 0) -> list[int]:
    """The child's pass ``epoch``, read alone."""
    if child.kind.name == "INDEXED":
        return np.asarray(child.get_batch_at(epoch * len(child), len(child))["x"]).tolist()
    child.seek(epoch, 0)
    return flat(read_all(child, 100))


@pytest.mark.parametrize("lengths, cycle_length, block_length", [
    ((3, 5, 2), 2, 2),
    ((4, 4, 4, 4), 2, 1),
    ((1, 7, 0, 3, 5), 3, 2),  # an empty child, children of uneven lengths
    ((6, 2), 1, 4),  # cycle 1: one child after the other
    ((5, 3), 4, 3),  # more slots than children
    ((2, 9, 4), 3, 5),  # blocks longer than some children
])
def test_the_order_is_tf_datas_cycle_and_block_order(lengths, cycle_length, block_length):
    bounds = np.cumsum((0, *lengths))
    ranges = [(100 * i + bounds[i], 100 * i + bounds[i + 1]) for i in range(len(lengths))]
    # odd children (and empty ones) are forward-only streams, the others in memory
    source = InterleaveSource([numbers(lo, hi) if i % 2 == 0 and hi > lo else generated(lo, hi)
                               for i, (lo, hi) in enumerate(ranges)],
                              cycle_length=cycle_length, block_length=block_length)
    children = [list(range(lo, hi)) for lo, hi in ranges]
    served = flat(read_all(source, 3))
    assert served == reference(children, cycle_length, block_length)


def test_children_of_every_kind_interleave_in_their_own_orders_pass_by_pass():
    def build():
        return [numbers(0, 5, shuffle=True, seed=1), generated(10, 17), numbers(20, 23)]

    source = InterleaveSource(build(), cycle_length=2, block_length=2)
    for epoch in range(3):
        source.seek(epoch, 0)
        expected = reference([own_order(c, epoch) for c in build()], 2, 2)
        assert flat(read_all(source, 4)) == expected
    assert own_order(build()[1], 1) == list(range(16, 9, -1))  # the stream's odd passes reverse


def test_stable_indices_are_the_childs_times_the_number_of_children_plus_the_child():
    source = InterleaveSource([numbers(0, 3), numbers(10, 12)], cycle_length=2)
    batch, stable = source.get_batch_with_indices(5)
    assert batch["x"].tolist() == [0, 10, 1, 11, 2]
    assert stable.tolist() == [0 * 2 + 0, 0 * 2 + 1, 1 * 2 + 0, 1 * 2 + 1, 2 * 2 + 0]


def build_mixed() -> InterleaveSource:
    return InterleaveSource([numbers(0, 7, shuffle=True, seed=3), generated(100, 111),
                             numbers(200, 204), generated(300, 302)],
                            cycle_length=3, block_length=2, num_epochs=-1)


@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_a_state_saved_at_any_batch_boundary_resumes_exactly_in_a_fresh_source(batch_size):
    def small(state: dict, before: list) -> None:  # JSON-able, a cursor of 3 + 2 per slot
        assert len(state["cursor"]) == 3 + 2 * 3

    check_resumes_at_every_batch(build_mixed, batch_size, check_state=small)


def test_a_cycle_longer_than_the_children_uses_one_slot_a_child_and_resumes():
    # a slot past the children stays empty: a cycle_length of 10**9 allocated 10**9 slots
    # and saved a cursor of 2 * 10**9 + 3 ints
    def build(cycle_length: int) -> InterleaveSource:
        return InterleaveSource([numbers(0, 3), generated(10, 14), numbers(20, 22)],
                                cycle_length=cycle_length, block_length=2)

    assert flat(read_all(build(10**9), 3)) == flat(read_all(build(3), 3)) == reference(
        [[0, 1, 2], [10, 11, 12, 13], [20, 21]], 3, 2)
    source = build(10**9)
    source.get_batch_with_indices(4)
    state = source.get_state()
    assert len(state["cursor"]) == 3 + 2 * 3
    resumed = build(10**9)
    resumed.set_state(state)
    assert flat(read_all(resumed, 2)) == flat(read_all(build(3), 9))[4:]
    with pytest.raises(StateError, match="cycle_length"):
        build(3).set_state(state)


def test_a_bare_position_is_reached_by_reading_the_pass_again():
    expected = read_all(build_mixed(), 3)
    source = build_mixed()
    source.set_state({"current_epoch": 0, "current_index": 9})  # no cursor, no settings
    assert read_all(source, 3) == expected[3:]


def test_nnx_state_restores_the_position_and_the_cursor_under_a_pipeline():
    def pipeline():
        return Pipeline(source=build_mixed(), stages=[], batch_size=4, rngs=nnx.Rngs(0))

    expected = [np.asarray(b["x"]).tolist() for b in pipeline()]
    for cut in range(len(expected)):
        old = pipeline()
        iterator = iter(old)
        for _ in range(cut):
            next(iterator)
        fresh = pipeline()
        nnx.update(fresh, nnx.state(old))
        assert [np.asarray(b["x"]).tolist() for b in fresh] == expected[cut:]


@pytest.mark.parametrize("owner", ["interleave", "shuffle_buffer"])
def test_nnx_update_rewinding_the_same_source_reopens_a_stream_child_standing_at_its_place(owner):
    """A stream child (a concatenation of a stream and memory) whose position nnx.update
    puts back where the slot or window resumes is read from there again, not from where
    its pass stood (its last 4 records were lost: the pass was past them)."""

    def build():
        child = ConcatSource([NumberStream(0, 5), numbers(10, 14)])
        if owner == "interleave":  # 2 batches: the child stands at 5, its slot too
            return InterleaveSource([child, numbers(100, 106)], cycle_length=2, block_length=3), 4, 2
        return ShuffleBufferSource(child, buffer_size=5, seed=0), 5, 1  # at window 1's start

    source, size, cut = build()
    expected = read_all(source, size)
    source, size, cut = build()
    for _ in range(cut):
        source.get_batch_with_indices(size)
    saved = nnx.clone(nnx.state(source))
    assert read_all(source, size) == expected[cut:]
    nnx.update(source, saved)  # the same source, rewound
    assert read_all(source, size) == expected[cut:]


def test_each_shard_keeps_its_record_of_every_whole_round():
    children = [list(range(0, 5)), list(range(10, 18)), list(range(20, 23))]
    order = reference(children, 2, 3)
    for index in range(3):
        source = InterleaveSource([numbers(0, 5), numbers(10, 18), numbers(20, 23)],
                                  cycle_length=2, block_length=3)
        source.set_shard(index, 3)
        served = flat(read_all(source, 2))
        assert served == order[index: len(order) - len(order) % 3: 3]


def test_text_fields_follow_their_records():
    def texts(lo: int, hi: int) -> MemorySource:
        x = np.arange(lo, hi, dtype=np.int32)
        return MemorySource(MemorySourceConfig(), {"x": x, "t": np.asarray([f"r{i}" for i in x])})

    source = InterleaveSource([texts(0, 2), texts(5, 7)], cycle_length=2)
    batch, _ = source.get_batch_with_indices(4)
    assert batch["x"].tolist() == [0, 5, 1, 6] and batch["t"] == ["r0", "r5", "r1", "r6"]


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, message", [
    ({"cycle_length": 0}, "InterleaveSourceConfig.cycle_length must be >= 1, got 0."),
    ({"cycle_length": 2, "block_length": 0},
     "InterleaveSourceConfig.block_length must be >= 1, got 0."),
    ({"cycle_length": 1.5}, "InterleaveSourceConfig.cycle_length must be an int, got float 1.5."),
])
def test_bad_cycle_or_block_lengths_are_refused(kwargs, message):
    with pytest.raises(ConfigError) as err:
        InterleaveSource([numbers(0, 3), numbers(3, 6)], **kwargs)
    assert str(err.value) == message


def test_children_that_cannot_be_interleaved_are_refused_naming_them():
    with pytest.raises(SourceContractError, match="source 1 is list, not a data source"):
        InterleaveSource([numbers(0, 3), [1, 2]], cycle_length=2)
    a = numbers(0, 3)
    with pytest.raises(SourceContractError, match="sources 0 and 1 are the same object"):
        InterleaveSource([a, a], cycle_length=2)
    sharded = numbers(0, 4)
    sharded.set_shard(0, 2)
    with pytest.raises(SourceContractError,
                       match="source 0 is sharded .* shard the interleave .* not its sources"):
        InterleaveSource([sharded], cycle_length=1)
    floats = MemorySource(MemorySourceConfig(), {"x": np.zeros(3, np.float32)})
    with pytest.raises(SpecMismatchError, match="field 'x' is int32.* in source 0 but float32"):
        InterleaveSource([numbers(0, 3), floats], cycle_length=2)
    with pytest.raises(ConfigError, match="needs at least one source; got an empty list"):
        InterleaveSource([], cycle_length=1)
    with pytest.raises(ConfigError, match="takes a list of sources, got MemorySource"):
        InterleaveSource(numbers(0, 3), cycle_length=1)  # type: ignore[arg-type]


def test_a_state_of_another_interleave_or_a_tampered_cursor_is_refused():
    source = InterleaveSource([numbers(0, 3), numbers(3, 6)], cycle_length=2)
    source.get_batch_with_indices(2)
    state = source.get_state()
    other = InterleaveSource([numbers(0, 3), numbers(3, 6)], cycle_length=2, block_length=2)
    with pytest.raises(StateError, match="block_length"):
        other.set_state(state)
    with pytest.raises(StateError, match="state 'cursor' must be") as err:
        InterleaveSource([numbers(0, 3), numbers(3, 6)], cycle_length=2).set_state(
            {**state, "cursor": [5, 0, 0, 0, 1, 1, 1]})
    assert err.value.field == "cursor"


# ------------------------------------- files, a mixture and a stream, side by side
def file_mix_stream(paths: list[str]) -> list[Any]:
    """ArrayRecord files (records 0-8, files shuffled), a mixture of memory 100-104 and a
    stream 200-203, and a stream 300-306."""
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import int_source

    from datarax.mixing import MixSource

    files = int_source(paths, seed=5, shuffle_files=True, num_threads=2)
    mixture = MixSource([numbers(100, 105, shuffle=True, seed=2), generated(200, 204)],
                        weights=[5, 4], seed=3, records_per_epoch=9)
    return [files, mixture, generated(300, 307)]


@pytest.fixture(scope="module")
def int_files(tmp_path_factory):
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import write_int_parts

    return write_int_parts(tmp_path_factory.mktemp("interleave_ar"), (3, 6, 9))


def test_files_a_mixture_and_a_stream_interleave_in_their_own_orders(int_files):
    source = InterleaveSource(file_mix_stream(int_files), cycle_length=2, block_length=3)
    for epoch in range(2):
        source.seek(epoch, 0)
        expected = reference([own_order(c, epoch) for c in file_mix_stream(int_files)], 2, 3)
        assert sorted(expected) == [*range(9), *range(100, 105), *range(200, 204), *range(300, 307)]
        assert flat(read_all(source, 4)) == expected
    source.close()


def test_files_a_mixture_and_a_stream_resume_at_every_batch_boundary(int_files):
    check_resumes_at_every_batch(
        lambda: InterleaveSource(file_mix_stream(int_files), cycle_length=2, block_length=3), 3)


def test_a_read_that_fails_is_read_again_from_the_last_batch_handed_out():
    source = InterleaveSource([numbers(0, 6), generated(10, 20, most_per_read=3, fail_on_read=2)],
                              cycle_length=2, block_length=2)
    served = []
    with pytest.raises(OSError, match="the disk hiccuped"):
        while True:
            served.append(np.asarray(source.get_batch_with_indices(8)[0]["x"]).tolist())
    served += read_all(source, 4)  # the retry
    assert flat(served) == reference(
        [list(range(6)), list(range(10, 20))], 2, 2)


def test_tf_datas_documented_example_gives_tf_datas_order():
    # tf.data.Dataset.range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
    # cycle_length=2, block_length=4) gives, by tf.data's own documentation:
    documented = [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4,
                  5, 5, 5, 5, 5, 5]
    source = InterleaveSource([numbers(10 * x, 10 * x + 6) for x in range(1, 6)],
                              cycle_length=2, block_length=4)
    served = flat(read_all(source, 7))
    assert [x // 10 for x in served] == documented
    assert reference([[x] * 6 for x in range(1, 6)], 2, 4) == documented  # the reference too
