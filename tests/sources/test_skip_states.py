"""A child's skip counts through one protocol (``skip_state()`` / ``restore_skip_state``):
nested compositions of parts that skip bad records (concat in concat, a flat map over
them, a mixture, an interleave and a shuffle buffer over such a flat map) resume each
part's budget exactly at every batch, states saved before the protocol restore
identically, and a failed batch puts a concatenation's counts by part back with its
total."""

from __future__ import annotations

import numpy as np
import pytest
from source_reads import flat, read_all, two_epochs

from datarax.core.errors import RecordError, SpecMismatchError
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    FlatMapSource,
    InterleaveSource,
    MemorySource,
    MemorySourceConfig,
    ShuffleBufferSource,
)
from datarax.testing import json_round_trip

from bad_rows import Rows, RowsConfig


def rows(n: int, offset: int = 0, bad=(), nan=(), budget: int | None = None) -> Rows:
    return Rows(RowsConfig(on_error="skip", max_skipped=budget), n, bad=bad, nan=nan,
                offset=offset)


def floats(lo: int, hi: int) -> MemorySource:
    return MemorySource(MemorySourceConfig(), {"x": np.arange(lo, hi, dtype=np.float32)})


def one(record):
    return [record]


def deep_parent(budget_b: int) -> ConcatSource:
    """``concat[concat[A, B], C]``: A skips 3 (its budget 3), B 3 (``budget_b``), C 1."""
    inner = ConcatSource([rows(100, bad={1, 2, 90}, budget=3),
                          rows(100, offset=100, bad={0, 30, 80}, budget=budget_b)])
    return ConcatSource([inner, rows(10, offset=200, bad={3}, budget=1)])


GOOD = ([x for x in range(100) if x not in {1, 2, 90}]
        + [100 + x for x in range(100) if x not in {0, 30, 80}]
        + [200 + x for x in range(10) if x != 3])


# ------------------------------------------- states saved before the protocol
# Saved by main at ea469e1 (before skip_state()), after the 9th batch of 16 of a flat
# map over deep_parent(3): the parent read on from position 133 (in B), its counts by
# part nested two levels deep.
FLAT_MAP_STATE = {"current_index": 144, "current_epoch": 0, "cursor": [133, 16],
                  "parent_skipped": 5, "parent_skips": {
                      "skipped": 5, "skipped_by_part": [5, 0],
                      "part_skips": {"skipped": 5, "skipped_by_part": [3, 2]}}}
# and after the 3rd batch of 3 of concat[concat[A', B'], memory] (tests/sources/
# test_concat.py's nested_skipping): inside B', which skipped 1 of its budget.
CONCAT_STATE = {"current_index": 12, "current_epoch": 0, "skipped": 3,
                "skipped_by_part": [3, 0],
                "part_skips": {"skipped": 3, "skipped_by_part": [2, 1]}}


def test_a_flat_map_state_saved_before_the_protocol_restores_identically():
    resumed = FlatMapSource(deep_parent(3), one, max_outputs=1)
    resumed.set_state(json_round_trip(FLAT_MAP_STATE))
    assert flat(read_all(resumed, 16)) == GOOD[144:]
    # B has skipped 2 of its budget of 2 there: its third bad record is over it
    resumed = FlatMapSource(deep_parent(2), one, max_outputs=1)
    resumed.set_state(json_round_trip(FLAT_MAP_STATE))
    with pytest.raises(RecordError, match=r"Rows: skipped 3 bad records in epoch 0, over "
                       r"the budget of 2 .* record 80 is broken"):
        read_all(resumed, 16)


@pytest.mark.parametrize("budget_b", [2, 1])
def test_a_nested_concat_state_saved_before_the_protocol_restores_identically(budget_b):
    inner = ConcatSource([rows(8, bad={1, 2}, budget=2),
                          rows(8, offset=100, bad={0, 5}, budget=budget_b)])
    resumed = ConcatSource([inner, floats(200, 204)])
    resumed.set_state(json_round_trip(CONCAT_STATE))
    assert resumed.get_state()["part_skips"] == CONCAT_STATE["part_skips"]
    if budget_b == 2:
        assert flat(read_all(resumed, 3)) == [104, 106, 107, 200, 201, 202, 203]
    else:  # B' skipped 1 of its budget of 1 there: its next bad record is over it
        with pytest.raises(RecordError, match="skipped 2 bad records in epoch 0, over the "
                           "budget of 1"):
            read_all(resumed, 3)


# --------------------------------------- resumes of nested compositions, two epochs
def over_deep_parent(budget_b: int) -> Pipeline:
    return Pipeline(source=FlatMapSource(deep_parent(budget_b), one, max_outputs=1),
                    stages=[], batch_size=48)


@pytest.mark.parametrize("budget_b", [3, 2], ids=["within-budget", "over-budget"])
def test_a_flat_map_over_nested_concats_resumes_every_budget_at_every_batch(budget_b):
    states: list = []
    whole = two_epochs(over_deep_parent(budget_b), states)
    if budget_b == 3:
        assert flat(whole) == 2 * GOOD
        assert FLAT_MAP_STATE in [s["source"] for s in states]  # the shape of before
    else:  # B's third bad record (parent position 180), read with the 3rd batch
        assert flat(whole[:-1]) == GOOD[:96] and len(whole) == 3
        assert whole[-1].startswith("RecordError: Rows: skipped 3 bad records in epoch 0")
    for k, state in enumerate(states):
        resumed = over_deep_parent(budget_b)
        resumed.set_state(state)
        assert whole[:k + 1] + two_epochs(resumed) == whole, f"resumed after batch {k}"


def skipping_stream(budget_b: int) -> FlatMapSource:
    """A flat map over ``concat[A, B]`` of skipping parts: it skips inside, its position
    counting the records it serves. B's second bad record lies past the parent's first
    read (64 positions)."""
    parts = ConcatSource([rows(6, bad={1}, budget=1),
                          rows(70, offset=100, bad={3, 60}, budget=budget_b)])
    return FlatMapSource(parts, one, max_outputs=1)


STREAM_GOOD = [x for x in range(6) if x != 1] + [100 + x for x in range(70) if x not in {3, 60}]


def over_skipping_stream(kind: str, budget_b: int) -> Pipeline:
    """A mixture (mode "epoch", 36 draws of the stream an epoch), an interleave or a
    shuffle buffer over :func:`skipping_stream`."""
    stream = skipping_stream(budget_b)
    if kind == "mixture":
        source = MixSource({"stream": stream, "memory": floats(500, 510)}, weights=[2, 1],
                           seed=3, records_per_epoch=54)
    elif kind == "interleave":
        source = InterleaveSource([stream, floats(500, 520)], cycle_length=2, block_length=3)
    else:
        source = ShuffleBufferSource(stream, buffer_size=10, seed=1)
    return Pipeline(source=source, stages=[], batch_size=12)


@pytest.mark.parametrize("budget_b", [2, 1], ids=["within-budget", "over-budget"])
@pytest.mark.parametrize("kind", ["mixture", "interleave", "shuffle-buffer"])
def test_a_reordering_source_over_a_stream_of_skipping_parts_resumes_at_every_batch(
        kind, budget_b):
    states: list = []
    whole = two_epochs(over_skipping_stream(kind, budget_b), states)
    served = [x for x in flat([b for b in whole if isinstance(b, list)]) if x < 500]
    if budget_b == 2:
        if kind == "mixture":  # the stream's pass read on across the mixture's epochs
            assert served == STREAM_GOOD[:72]
        else:  # each epoch the stream's whole pass, once
            assert sorted(served) == sorted(2 * STREAM_GOOD)
    else:  # B's second bad record (its 60) is over its budget of 1, at the same batch
        assert whole[-1].startswith("RecordError: Rows: skipped 2 bad records in epoch 0")
    for k, state in enumerate(states):
        resumed = over_skipping_stream(kind, budget_b)
        resumed.set_state(state)
        assert whole[:k + 1] + two_epochs(resumed) == whole, f"resumed after batch {k}"


# ------------------------------------------------------ a failed batch put back
def flat_pair(budget_b: int, nan=()) -> ConcatSource:
    return ConcatSource([rows(6, bad={1, 4}, budget=2),
                         rows(10, offset=10, bad={0, 7}, nan=nan, budget=budget_b)])


def nested_pair(budget_b: int, nan=()) -> ConcatSource:
    return ConcatSource([flat_pair(budget_b, nan), floats(50, 53)])


def part_b(source: ConcatSource) -> Rows:
    pair = source.parts[0] if isinstance(source.parts[0], ConcatSource) else source
    return pair.parts[1]


@pytest.mark.parametrize("build", [flat_pair, nested_pair], ids=["concat", "concat-in-concat"])
@pytest.mark.parametrize("budget_b", [2, 1], ids=["within-budget", "over-budget"])
def test_a_failed_batch_puts_back_every_count_by_part(build, budget_b):
    """Record 12 (part B's 2) holds NaN once: the batch reading it (after B skipped its
    0) fails; the next batches, and a state saved right after the failure, serve what a
    run without the failure serves, and meet the same budget error at the same batch."""
    def pipeline(source: ConcatSource) -> Pipeline:
        return Pipeline(source=source, stages=[], batch_size=3, check_finite=True)

    clean = two_epochs(pipeline(build(budget_b)))
    source = build(budget_b, nan={2})
    failing = pipeline(source)
    it = iter(failing)
    first = [np.asarray(next(it)["x"]).tolist()]
    with pytest.raises(SpecMismatchError, match="NaN"):
        next(it)
    saved = json_round_trip(failing.get_state())
    part_b(source).nan.clear()
    assert first + two_epochs(failing) == clean
    resumed = pipeline(build(budget_b))
    resumed.set_state(saved)
    assert first + two_epochs(resumed) == clean
    if budget_b == 1:
        assert clean[-1].startswith("RecordError: Rows: skipped 2 bad records in epoch 0")
