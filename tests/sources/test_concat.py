"""ConcatSource: parts in turn, its kind from its parts, exact resume, refused mismatches.

The conformance table (tests/conformance) runs a host and a stream concatenation
through every contract clause; these tests pin the values.
"""

from __future__ import annotations


import jax
import numpy as np
import pytest
from flax import nnx
from int_record_files import damaged_copy, write_records
from number_sources import NumberStream, numbers
from source_reads import check_pipeline_resumes, two_epochs

from datarax.core.lengths import length_or_none
from datarax.core.errors import SourceContractError, SpecMismatchError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import (
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    ConcatSource,
    MemorySource,
    MemorySourceConfig,
)
from datarax.testing import json_round_trip

from bad_rows import Rows, RowsConfig


def xs(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b["x"])]


def test_indexed_parts_make_an_indexed_source_serving_each_part_epoch_in_turn():
    source = ConcatSource([numbers(0, 5, shuffle=True, seed=7), numbers(100, 103)])
    assert source.kind.name == "INDEXED" and len(source) == 8
    read = jax.jit(lambda start: source.get_batch_and_indices_at(start, 8))  # traced, as in a step
    epochs = [read(8 * e) for e in range(2)]
    for batch, _ in epochs:  # part 0's records (its own shuffle), then part 1's in order
        x = batch["x"].tolist()
        assert sorted(x[:5]) == [0, 1, 2, 3, 4] and x[5:] == [100, 101, 102]
    assert epochs[0][0]["x"].tolist() != epochs[1][0]["x"].tolist()  # part 0 reshuffles
    # Stable indices: the part's own stable index plus the records before the part; a
    # read across the epoch's end goes on with the next epoch's records.
    batch, stable = read(3)
    part0 = source.parts[0].record_indices_at(3, 2).tolist()
    next0 = source.parts[0].record_indices_at(5, 3).tolist()
    assert stable.tolist() == [*part0, 5, 6, 7, *next0]
    assert batch["x"].tolist()[2:5] == [100, 101, 102]


def test_a_part_with_text_fields_makes_a_host_concatenation_reading_part_by_part():
    text = {"t": np.asarray(["a", "b", "c"])}
    source = ConcatSource([numbers(0, 3, **text), numbers(10, 13, t=np.asarray(["d", "e", "f"]))])
    assert source.kind.name == "HOST"
    batch, stable = source.get_batch_with_indices(4)
    assert batch["x"].tolist() == [0, 1, 2, 10] and batch["t"] == ["a", "b", "c", "d"]
    assert stable.tolist() == [0, 1, 2, 3]
    state = json_round_trip(source.get_state())
    fresh = ConcatSource([numbers(0, 3, **text), numbers(10, 13, t=np.asarray(["d", "e", "f"]))])
    fresh.set_state(state)
    batch, stable = fresh.get_batch_with_indices(4)
    assert batch["t"] == ["e", "f"] and stable.tolist() == [4, 5]
    assert fresh.get_batch_with_indices(4) == (None, None)  # the epoch's end


def test_a_part_of_unknown_length_makes_a_stream_that_resumes_by_reading_again():
    def build() -> ConcatSource:
        return ConcatSource([numbers(0, 3), NumberStream(50, 54)])

    source = build()
    assert source.kind.name == "STREAM" and length_or_none(source) is None
    with pytest.raises(TypeError, match=r"parts \[1\] do not know theirs"):
        len(source)
    pipeline = Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0))
    iterator = iter(pipeline)
    first = [next(iterator), next(iterator)]
    state = json_round_trip(iterator.get_state())
    rest = list(iterator)
    assert xs(first + rest) == [0, 1, 2, 50, 51, 52, 53]
    fresh = Pipeline(source=build(), stages=[], batch_size=2, rngs=nnx.Rngs(0))
    resumed = iter(fresh)
    resumed.set_state(state)
    assert xs(resumed) == xs(rest)
    assert xs(fresh) == [0, 1, 2, 50, 51, 52, 53]  # the next epoch, whole again


def test_a_state_of_another_concatenation_is_refused_naming_the_setting():
    source = ConcatSource([numbers(0, 4, shuffle=True, seed=1), numbers(10, 12)])
    source.get_batch_with_indices(3)
    state = source.get_state()
    other_seed = ConcatSource([numbers(0, 4, shuffle=True, seed=2), numbers(10, 12)])
    with pytest.raises(StateError, match=r"parts\[0\]\.seed=1 but this source has parts\[0\]\.seed=2"):
        other_seed.set_state(state)
    fewer = ConcatSource([numbers(0, 4, shuffle=True, seed=1)])
    with pytest.raises(StateError, match="num_parts=2 but this source has num_parts=1"):
        fewer.set_state(state)
    longer = ConcatSource([numbers(0, 4, shuffle=True, seed=1), numbers(10, 13)])
    with pytest.raises(StateError, match=r"parts\[1\]\.num_records=2"):
        longer.set_state(state)


def test_parts_that_disagree_on_the_spec_are_refused_naming_part_and_field():
    floats = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.float32)})
    with pytest.raises(SpecMismatchError, match=r"field 'x' is int32\(\) in part 0 but float32\(\) in part 1"):
        ConcatSource([numbers(0, 3), floats])
    extra = numbers(0, 3, y=np.zeros((3, 2), np.float32))
    with pytest.raises(SpecMismatchError, match="field 'y' is in part 2 but not in part 0"):
        ConcatSource([numbers(0, 3), numbers(3, 6), extra])


def test_parts_that_cannot_be_concatenated_are_refused():
    a = numbers(0, 3)
    with pytest.raises(SourceContractError, match="parts 0 and 1 are the same object"):
        ConcatSource([a, a])
    sharded = numbers(0, 4)
    sharded.set_shard(0, 2)
    with pytest.raises(SourceContractError, match=r"part 1 is sharded \(share 0 of 2\); shard the "
                       r"concatenation \(the Pipeline does\), not its parts"):
        ConcatSource([numbers(0, 3), sharded])
    with pytest.raises(SourceContractError, match="part 0 is list, not a data source"):
        ConcatSource([[1, 2]])  # type: ignore[list-item]
    with pytest.raises(Exception, match="at least one source"):
        ConcatSource([])


def test_shards_of_a_host_concatenation_are_disjoint_blocks_across_parts():
    text = {"t": np.asarray(["r"] * 5)}
    served = []
    for index in range(2):
        source = ConcatSource([numbers(0, 5, **text), numbers(5, 9, t=np.asarray(["s"] * 4))])
        source.set_shard(index, 2)
        batch, _ = source.get_batch_with_indices(10)
        served.append(batch["x"].tolist())
    assert served == [[0, 1, 2, 3], [4, 5, 6, 7]]  # 9 // 2 each; the last left out


def test_close_closes_every_part_even_when_one_fails_and_raises_that_error():
    closed: list[str] = []

    class Failing(MemorySource):
        def close(self) -> None:
            closed.append("failing")
            raise OSError("disk gone")

    class Counted(MemorySource):
        def close(self) -> None:
            closed.append("counted")

    data = {"x": np.arange(3, dtype=np.int32)}
    concat = ConcatSource([Failing(MemorySourceConfig(), data), Counted(MemorySourceConfig(), data)])
    with pytest.raises(OSError, match="disk gone"):
        concat.close()
    assert closed == ["failing", "counted"]


# ------------------------------------------------ parts that skip bad records
def rows(n: int, offset: int = 0, bad=(), nan=(), **policy) -> Rows:
    """``n`` records ``x = offset + i`` under the error policy ``policy``."""
    return Rows(RowsConfig(**policy), n, bad=bad, nan=nan, offset=offset)


def skipping_pair(**kw) -> ConcatSource:
    return ConcatSource([rows(10, bad={2, 3, 9}, on_error="skip", max_skipped=3, **kw),
                         rows(6, offset=100)])


EXPECTED = [0, 1, 4, 5, 6, 7, 8, 100, 101, 102, 103, 104, 105]


def test_a_part_that_skips_bad_records_is_read_to_its_end_and_resumed_exactly():
    def within_budget(resumed, k) -> None:  # part 0 skipped within its budget of 3
        assert resumed.source.parts[0].get_state()["skipped"] in (0, 3)

    pipeline, batches, states = check_pipeline_resumes(
        lambda: Pipeline(source=skipping_pair(), stages=[], batch_size=4),
        lambda batch: xs([batch]), after=within_budget)
    assert sum(batches, []) == EXPECTED
    assert [len(b) for b in batches] == [4, 4, 4, 1]
    # positions count the skipped records: 2 and 3 before batch 1 ends, 9 in batch 2
    assert [(s["source"]["current_index"], s["source"]["skipped"],
             s["source"]["skipped_by_part"]) for s in states] == [
        (6, 2, [2, 0]), (11, 3, [3, 0]), (15, 3, [3, 0]), (16, 3, [3, 0])]
    assert [r.index for r in pipeline.source.parts[0].skipped_records()] == [2, 3, 9]


def test_a_stream_concatenation_of_skipping_parts_serves_each_good_record_once_at_any_resume():
    from datarax.sources import FlatMapSource

    def build() -> ConcatSource:  # a stream part (the flat map) makes a stream concatenation
        return ConcatSource([rows(10, bad={2, 3, 9}, on_error="skip"),
                             FlatMapSource(rows(6, offset=100, bad={0, 4}, on_error="skip"),
                                           lambda record: [record], max_outputs=1)])

    assert build().kind.name == "STREAM"
    _, batches, _ = check_pipeline_resumes(
        lambda: Pipeline(source=build(), stages=[], batch_size=3), lambda batch: xs([batch]))
    assert sum(batches, []) == [0, 1, 4, 5, 6, 7, 8, 101, 102, 103, 105]


def test_a_retried_batch_across_a_skipping_part_keeps_the_part_budget():
    source = ConcatSource([rows(10, bad={2, 3, 9}, on_error="skip", max_skipped=3),
                           rows(6, offset=100, nan={1})])
    it = iter(Pipeline(source=source, stages=[], batch_size=4, check_finite=True))
    assert xs([next(it), next(it)]) == EXPECTED[:8]
    for _ in range(3):  # record 9 of part 0 skipped again each time, not over budget
        with pytest.raises(SpecMismatchError, match="NaN"):
            next(it)
        assert (source.index, source.get_state()["skipped"]) == (11, 3)
    source.parts[1].nan.clear()
    assert xs(it) == EXPECTED[8:]
    assert [r.index for r in source.parts[0].skipped_records()] == [2, 3, 9]


def test_a_shard_end_inside_a_skipping_part_is_not_read_past():
    served = []
    for index in range(2):  # 16 positions: shard 0 is 0-7 (in part 0), shard 1 is 8-15
        source = ConcatSource([rows(10, bad={6, 7}, on_error="skip"), rows(6, offset=100)])
        source.set_shard(index, 2)
        batches = []
        while (batch := source.get_batch_with_indices(8)[0]) is not None:
            batches.append(batch)
        served.append(xs(batches))
    assert served == [[0, 1, 2, 3, 4, 5], [8, 9, 100, 101, 102, 103, 104, 105]]


def test_a_state_with_a_wrong_count_by_part_is_refused():
    source = skipping_pair()
    state = {"current_epoch": 0, "current_index": 6, "skipped": 2, "skipped_by_part": [1, 0]}
    with pytest.raises(StateError, match=r"'skipped_by_part' must be a list of 2 ints >= 0 "
                       r"\(records each part skipped, adding up to 'skipped' \(2\)\), got "
                       r"\[1, 0\]; pass the dict ConcatSource.get_state\(\) returned"):
        source.set_state(state)


def nested_skipping(budget_b: int) -> Pipeline:
    """``concat[concat[A, B], memory]``: A skips 2 bad records (its budget 2), B skips 2
    (its budget ``budget_b``)."""
    inner = ConcatSource([rows(8, bad={1, 2}, on_error="skip", max_skipped=2),
                          rows(8, offset=100, bad={0, 5}, on_error="skip", max_skipped=budget_b)])
    memory = MemorySource(MemorySourceConfig(), {"x": np.arange(200, 204, dtype=np.float32)})
    return Pipeline(source=ConcatSource([inner, memory]), stages=[], batch_size=3)


@pytest.mark.parametrize("budget_b", [2, 1], ids=["within-budget", "over-budget"])
def test_a_nested_concatenation_of_skipping_parts_resumes_each_part_budget_exactly(budget_b):
    states: list = []
    whole = two_epochs(nested_skipping(budget_b), states)
    if budget_b == 2:  # every budget met exactly, in both epochs
        assert whole == 2 * [[0, 3, 4], [5, 6, 7], [101, 102, 103], [104, 106, 107],
                             [200, 201, 202], [203]]
        # inside part B the state carries the inner concatenation's counts by part
        assert states[2]["source"]["part_skips"] == {"skipped": 3, "skipped_by_part": [2, 1]}
    else:  # B's second bad record is over its budget of 1, in the fourth batch
        assert whole[:3] == [[0, 3, 4], [5, 6, 7], [101, 102, 103]]
        assert whole[3].startswith("RecordError: Rows: skipped 2 bad records in epoch 0, over "
                                   "the budget of 1")
    for k, state in enumerate(states):
        resumed = nested_skipping(budget_b)
        resumed.set_state(state)
        assert whole[:k + 1] + two_epochs(resumed) == whole, f"resumed after batch {k}"


def test_a_nested_state_without_part_skips_restores_as_before_and_a_wrong_one_is_refused():
    states: list = []
    two_epochs(nested_skipping(2), states)
    old = json_round_trip(states[0])  # inside part A: the total alone was always exact
    assert "part_skips" in old["source"]
    del old["source"]["part_skips"]
    resumed = nested_skipping(2)
    resumed.set_state(old)
    assert xs(resumed) == [5, 6, 7, 101, 102, 103, 104, 106, 107, 200, 201, 202, 203]
    wrong = json_round_trip(states[2])
    wrong["source"]["part_skips"]["skipped"] = 2
    with pytest.raises(StateError, match=r"'part_skips' must be the skip counts of the "
                       r"concatenation part at the position"):
        nested_skipping(2).set_state(wrong)


def test_a_corrupt_array_record_part_is_skipped_within_a_concatenation(tmp_path):
    write_records(tmp_path / "a.array_record",
                  (np.full(64, i, np.float32).tobytes() for i in range(30)))
    damaged_copy(tmp_path / "a.array_record", tmp_path / "bad.array_record")

    def decode(record: bytes) -> dict[str, np.ndarray]:
        return {"x": np.frombuffer(record, np.float32)[:1].astype(np.int32).reshape(())}

    def part(name: str, **config) -> ArrayRecordSourceModule:
        return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config),
                                       str(tmp_path / name), decode=decode, num_threads=1)

    def build() -> ConcatSource:
        return ConcatSource([part("bad.array_record", on_error="skip"),
                             part("a.array_record")])

    source = build()
    pipeline = Pipeline(source=source, stages=[], batch_size=8)
    it = iter(pipeline)
    first = xs([next(it)])
    state = json_round_trip(it.get_state())
    rest = xs(it)
    bad = sorted({r.index_in_file for r in source.parts[0].skipped_records()})
    assert bad and first + rest == [i for i in range(30) if i not in bad] + list(range(30))
    resumed = Pipeline(source=build(), stages=[], batch_size=8)
    resumed.set_state(state)
    assert xs(resumed) == rest


class _EndsEarly(Rows):
    """Rows whose pass ends at 3 of the 5 records its length says."""

    def get_batch_with_indices(self, batch_size):
        if self.index >= 3:
            return None, None
        return super().get_batch_with_indices(min(batch_size, 3 - self.index))


@pytest.mark.parametrize("stream", [False, True])
def test_a_part_that_ends_its_pass_before_its_length_is_named_by_its_number(stream):
    """A host concatenation and a stream one (a flat-mapped part: length unknown) alike."""
    from datarax.sources import FlatMapSource

    later = MemorySource(MemorySourceConfig(), {"x": np.arange(100, 102, dtype=np.float32)})
    if stream:
        later = FlatMapSource(later, lambda r: [r], max_outputs=1)
    source = ConcatSource([_EndsEarly(RowsConfig(), n=5), later])
    assert source.kind.name == ("STREAM" if stream else "HOST")
    with pytest.raises(SourceContractError, match=(
            r"^ConcatSource part 0 \(_EndsEarly\) ended its pass 0 at position 3; its length "
            r"says 5\. A source read by another must pass every position")):
        while source.get_batch_with_indices(2)[0] is not None:
            pass
