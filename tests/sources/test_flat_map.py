"""FlatMapSource: 0 .. k records per record, exact resume from an O(1) cursor, clear errors.

The conformance table (tests/conformance) runs a flat-mapped source through every
contract clause; these tests pin values and messages.
"""

from __future__ import annotations


import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.lengths import length_or_none
from datarax.core.dtypes import NarrowingError
from datarax.core.errors import ConfigError, DataraxError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import (ConcatSource, FlatMapSource, MemorySource, MemorySourceConfig,
                             StreamSource)
from datarax.testing import json_round_trip

from bad_rows import Rows, RowsConfig
from int_record_files import damaged_copy, int32, write_records
from number_sources import NumberStream, numbers
from source_reads import check_pipeline_resumes, check_resumes_at_every_batch, flat, two_epochs
from source_reads import read_all as read


def parent(n: int = 6, shuffle: bool = False) -> MemorySource:
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=3), {"r": np.arange(n, dtype=np.int32)})


def copies(record):
    """Record r gives r % 3 records: (r, 0), (r, 1)."""
    r = int(record["r"])
    return [{"r": np.int32(r), "k": np.int32(k)} for k in range(r % 3)]


def pairs(batch) -> list[tuple[int, int]]:
    return list(zip(np.asarray(batch["r"]).tolist(), np.asarray(batch["k"]).tolist()))


def pairs_and_stable(batch, stable) -> tuple[list[tuple[int, int]], list[int]]:
    return pairs(batch), stable.tolist()


def read_all(source, size):
    return read(source, size, pairs_and_stable)


def test_each_record_gives_its_outputs_in_order_with_stable_indices_from_parent_and_offset():
    source = FlatMapSource(parent(), copies, max_outputs=2)
    assert source.kind.name == "STREAM" and length_or_none(source) is None
    assert {k: (v.shape, str(v.dtype)) for k, v in source.element_spec().items()} == {
        "r": ((), "int32"), "k": ((), "int32")
    }
    served = read_all(source, 4)
    assert [p for batch, _ in served for p in batch] == [(1, 0), (2, 0), (2, 1), (4, 0), (5, 0), (5, 1)]
    assert [s for _, stable in served for s in stable] == [2, 4, 5, 8, 10, 11]  # r * 2 + k


def test_a_state_saved_after_any_batch_resumes_exactly_with_a_two_number_cursor():
    def build():
        return FlatMapSource(parent(9, shuffle=True), copies, max_outputs=2)

    def two_numbers(state, before) -> None:
        assert len(state["cursor"]) == 2
        assert state["current_index"] == sum(len(batch) for batch, _ in before)

    check_resumes_at_every_batch(build, 2, view=pairs_and_stable, check_state=two_numbers)


def test_a_bare_position_is_reached_by_reading_the_pass_again():
    expected = read_all(FlatMapSource(parent(), copies, max_outputs=2), 1)
    source = FlatMapSource(parent(), copies, max_outputs=2)
    source.set_state({"current_epoch": 0, "current_index": 4})  # no cursor
    assert read_all(source, 1) == expected[4:]


def test_a_pipeline_over_a_stream_parent_resumes_and_shards_in_whole_rounds():
    class Docs(StreamSource):
        """Documents of lengths 0 .. 5 (token i of document d is 10 * d + i)."""

        def __init__(self) -> None:
            super().__init__(MemorySourceConfig())
            self.next_doc = 0

        def restart(self, epoch: int) -> None:
            self.next_doc = 0

        def get_batch(self, batch_size: int):
            if self.next_doc >= 6:
                return None
            docs = np.arange(self.next_doc, min(6, self.next_doc + batch_size), dtype=np.int32)
            self.next_doc += len(docs)
            return {"doc": docs}

        def element_spec(self):
            return {"doc": jax.ShapeDtypeStruct((), np.int32)}

    def windows(record):  # windows of 2 tokens, stride 1, over a document of `doc` tokens
        d = int(record["doc"])
        tokens = 10 * d + np.arange(d, dtype=np.int32)
        return [{"w": tokens[i : i + 2]} for i in range(max(d - 1, 0))]

    def build(index=0, count=1):
        source = FlatMapSource(Docs(), windows, max_outputs=4)
        return Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0),
                        shard_index=index, shard_count=count)

    whole = [np.asarray(b["w"]).tolist() for b in build()]
    served = flat(whole)
    assert served[:3] == [[20, 21], [30, 31], [31, 32]] and len(served) == 10  # 0+0+1+2+3+4
    iterator = iter(build())
    next(iterator)
    state = json_round_trip(iterator.get_state())
    assert state["source"]["cursor"] == [3, 2]  # document 3, past both its windows
    resumed = iter(build())
    resumed.set_state(state)
    assert [np.asarray(b["w"]).tolist() for b in resumed] == whole[1:]
    shares = [[w for b in build(i, 3) for w in np.asarray(b["w"]).tolist()] for i in range(3)]
    assert shares == [served[0:9:3], served[1:9:3], served[2:9:3]]  # whole rounds of 3; the 10th left out


def test_an_output_of_another_structure_is_refused_naming_the_record_and_field():
    def uneven(record):
        r = int(record["r"])
        return [{"r": np.zeros(2 if r < 3 else 3, np.int32)}]

    source = FlatMapSource(parent(), uneven, max_outputs=1)
    with pytest.raises(DataraxError, match=r"field 'r' of output 0 of parent record 3 is int32\(3,\), "
                                           r"the first output of parent record 0 has int32\(2,\)"):
        read_all(source, 4)

    def renamed(record):
        return [{"a" if int(record["r"]) == 0 else "b": np.int32(1)}]

    with pytest.raises(DataraxError, match=r"output 0 of parent record 1 has fields \['b'\]"):
        read_all(FlatMapSource(parent(), renamed, max_outputs=1), 4)


def test_a_64bit_output_that_does_not_fit_names_its_path_and_the_fix_in_fn():
    def widen(record):
        r = int(record["r"])
        return [{"r": np.int32(r), "meta": {"id": np.int64(2**40 if r == 2 else r)}}]

    with pytest.raises(NarrowingError) as err:
        read(FlatMapSource(parent(), widen, max_outputs=1), 6, lambda batch, stable: None)
    assert str(err.value) == (
        "FlatMapSource, output 0 of parent record 2 (position 2 of pass 0): field 'meta/id' is "
        "int64 and holds 1099511627776, outside the int32 range, so it cannot be cast to int32 "
        "without loss while jax_enable_x64 is off. Enable x64 with "
        "jax.config.update('jax_enable_x64', True), or cast or drop the field in fn.")


def test_bad_returns_of_fn_are_refused_naming_the_parent_record():
    too_many = FlatMapSource(parent(), lambda r: [{"x": np.int32(0)}] * 3, max_outputs=2)
    with pytest.raises(DataraxError, match=r"returned 3 records for parent record 0 .*max_outputs=2"):
        too_many.element_spec()
    not_a_list = FlatMapSource(parent(), lambda r: {"x": np.int32(0)}, max_outputs=2)
    with pytest.raises(DataraxError, match="fn returned dict for parent record 0"):
        not_a_list.element_spec()

    def fails(record):
        if int(record["r"]) == 4:
            raise KeyError("oops")
        return [{"x": np.int32(0)}]

    with pytest.raises(DataraxError, match=r"fn raised KeyError on parent record 4 \(position 4 of pass 0\)"):
        read_all(FlatMapSource(parent(), fails, max_outputs=1), 8)
    nothing = FlatMapSource(parent(), lambda r: [], max_outputs=1)
    with pytest.raises(DataraxError, match="fn returned no record for any record"):
        nothing.get_batch_with_indices(2)
    empty = FlatMapSource(NumberStream(0, 0), lambda r: [r], max_outputs=1)
    with pytest.raises(DataraxError, match=r"the parent \(NumberStream\) holds no record in its "
                                           "first pass"):
        empty.get_batch_with_indices(2)


def test_a_state_of_another_flat_map_is_refused():
    source = FlatMapSource(parent(), copies, max_outputs=2)
    source.get_batch_with_indices(2)
    state = source.get_state()
    with pytest.raises(StateError, match="max_outputs=2 but this source has max_outputs=3"):
        FlatMapSource(parent(), copies, max_outputs=3).set_state(state)
    with pytest.raises(StateError, match="fn_name="):
        FlatMapSource(parent(), lambda r: copies(r), max_outputs=2).set_state(state)
    with pytest.raises(StateError, match=r"'cursor' must be a list of 2 ints >= 0 "
                       r"\(parent position, output offset\), got \[1\]"):
        FlatMapSource(parent(), copies, max_outputs=2).set_state({**state, "cursor": [1]})


def test_a_state_of_another_function_of_the_same_name_is_refused_by_its_source():
    def build(fn):
        return FlatMapSource(parent(), fn, max_outputs=2)

    once = lambda r: [r]  # noqa: E731 -- two lambdas: the same qualified name
    twice = lambda r: [r, r]  # noqa: E731
    source = build(twice)
    source.get_batch_with_indices(3)
    state = source.get_state()
    with pytest.raises(StateError, match=r"saved over another fn: both are named .*<lambda>.*"
                       r"restore it into a flat map of the function that saved it"):
        build(once).set_state(state)
    resumed = build(twice)  # the same function (rebuilt source): restores and continues
    resumed.set_state(state)
    assert resumed.get_batch_with_indices(2)[0]["r"].tolist() == [1, 2]
    older = {**state, "settings": {k: v for k, v in state["settings"].items() if k != "fn_source"}}
    before = build(twice)  # a state saved before fn_source was kept: by name, as then
    before.set_state(older)
    assert before.get_batch_with_indices(2)[0]["r"].tolist() == [1, 2]


def test_a_parent_that_is_not_an_unsharded_source_is_refused_saying_what_to_do():
    from datarax.core.errors import SourceContractError

    with pytest.raises(SourceContractError, match="FlatMapSource source is list, not a data source"):
        FlatMapSource([1, 2], copies, max_outputs=2)  # type: ignore[arg-type]
    sharded = parent()
    sharded.set_shard(1, 2)
    with pytest.raises(SourceContractError, match=r"FlatMapSource source is sharded \(share 1 of 2\); "
                       r"shard the flat-mapped source \(the Pipeline does\), not its parent"):
        FlatMapSource(sharded, copies, max_outputs=2)


def test_iterating_a_finished_stream_directly_again_starts_it_over():
    from datarax.sources import ConcatSource

    def values(source):
        return [int(record["r"]) for record in source]

    flat_map = FlatMapSource(parent(3), lambda record: [record], max_outputs=1, num_epochs=2)
    both = ConcatSource([parent(2), FlatMapSource(parent(2), lambda r: [r], max_outputs=1)])
    for source, once in ((flat_map, [0, 1, 2, 0, 1, 2]), (both, [0, 1, 0, 1])):
        assert values(source) == once
        assert values(source) == once  # as a finished source of known length does


# ------------------------------------------------ a parent that skips bad records
BAD = {2, 3, 63, 64, 65, 100, 149}  # inside chunks and across their edges (64 records)


def skipping_parent() -> Rows:
    return Rows(RowsConfig(on_error="skip", max_skipped=len(BAD)), 150, bad=BAD)


def spread(record):
    """Record x gives x % 3 records (x, 0), (x, 1): none for some, two for others."""
    x = int(record["x"])
    return [{"x": np.int32(x), "k": np.int32(k)} for k in range(x % 3)]


def test_a_parent_that_skips_bad_records_expands_each_good_one_once_and_resumes_exactly():
    def build():
        return FlatMapSource(skipping_parent(), spread, max_outputs=2)

    def skip_count_kept(resumed, k) -> None:  # the parent's budget of 7 continues
        assert resumed.source.source.get_state()["skipped"] == len(BAD), f"after batch {k}"

    pipeline, batches, _ = check_pipeline_resumes(
        lambda: Pipeline(source=build(), stages=[], batch_size=7), pairs_x, after=skip_count_kept)
    # no good record dropped or expanded twice
    assert flat(batches) == [(x, k) for x in range(150) if x not in BAD for k in range(x % 3)]
    parent_ = pipeline.source.source
    assert sorted(r.index for r in parent_.skipped_records()) == sorted(BAD)
    assert parent_.get_state()["skipped"] == len(BAD)  # each bad record counted once


def test_a_damaged_array_record_parent_is_expanded_once_per_good_record_across_resumes(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from datarax.sources import ArrayRecordSourceModule

    write_records(tmp_path / "a.array_record", (int32(i) * 16 for i in range(200)))
    damaged, bad = damaged_copy(tmp_path / "a.array_record", tmp_path / "bad.array_record")

    def decode(record: bytes) -> dict[str, np.ndarray]:
        return {"x": np.frombuffer(record, np.int32)[0].reshape(())}

    def build() -> Pipeline:
        parent_ = ArrayRecordSourceModule(paths=damaged, decode=decode, on_error="skip",
                                          num_threads=1)
        return Pipeline(source=FlatMapSource(parent_, spread, max_outputs=2), stages=[],
                        batch_size=8)

    def skip_count_kept(resumed, k) -> None:
        assert resumed.source.source.get_state()["skipped"] == len(bad), f"after batch {k}"

    pipeline, batches, _ = check_pipeline_resumes(build, pairs_x, after=skip_count_kept)
    assert {r.index_in_file for r in pipeline.source.source.skipped_records()} == set(bad)
    assert len(bad) < 200
    assert flat(batches) == [(x, k) for x in range(200) if x not in bad for k in range(x % 3)]


def test_a_bad_skip_count_in_a_flat_map_state_is_refused():
    source = FlatMapSource(skipping_parent(), spread, max_outputs=2)
    source.get_batch_with_indices(5)
    state = source.get_state()
    assert state["cursor"] == [0, 5] and state["parent_skipped"] == 0  # 0, 1 (2, 3 skipped), 4
    with pytest.raises(StateError, match=r"'parent_skipped' must be an int in \[0, 0\]"):
        FlatMapSource(skipping_parent(), spread, max_outputs=2).set_state(
            {**state, "parent_skipped": 3})


def one(record):
    return [record]


def over_skipping_concat(budget_b: int) -> Pipeline:
    """A flat map over ``concat[A, B]``: A skips 3 bad records (its budget 3), B 3 (its
    budget ``budget_b``); the parent's third read of 64 starts inside B."""
    parts = ConcatSource([
        Rows(RowsConfig(on_error="skip", max_skipped=3), 100, bad={1, 2, 90}),
        Rows(RowsConfig(on_error="skip", max_skipped=budget_b), 100, bad={0, 30, 80}, offset=100)])
    return Pipeline(source=FlatMapSource(parts, one, max_outputs=1), stages=[], batch_size=16)


@pytest.mark.parametrize("budget_b", [3, 2], ids=["within-budget", "over-budget"])
def test_a_flat_map_over_a_concat_of_skipping_parts_resumes_each_part_budget_exactly(budget_b):
    states: list = []
    whole = two_epochs(over_skipping_concat(budget_b), states)
    good = [x for x in range(100) if x not in {1, 2, 90}] + [
        100 + x for x in range(100) if x not in {0, 30, 80}]
    if budget_b == 3:  # every budget met exactly, in both epochs
        assert flat(whole) == 2 * good
        # read on from position 132 (in B): the parent's counts by part there
        assert {"skipped": 5, "skipped_by_part": [3, 2]} in [
            s["source"].get("parent_skips") for s in states]
    else:  # B's third bad record (position 180) is over its budget of 2
        assert whole[-1].startswith("RecordError: Rows: skipped 3 bad records in epoch 0, over "
                                    "the budget of 2")
    for k, state in enumerate(states):
        resumed = over_skipping_concat(budget_b)
        resumed.set_state(state)
        assert whole[:k + 1] + two_epochs(resumed) == whole, f"resumed after batch {k}"


def pairs_x(batch) -> list[tuple[int, int]]:
    return list(zip(np.asarray(batch["x"]).tolist(), np.asarray(batch["k"]).tolist()))


def test_close_epoch_stops_the_parents_read_ahead_and_keeps_the_position():
    source = FlatMapSource(skipping_parent(), spread, max_outputs=2)
    first, _ = source.get_batch_with_indices(5)
    assert source.source.host_reader.active
    source.close_epoch()
    assert not source.source.host_reader.active and source.index == 5
    assert pairs_x(first) + pairs_x(source.get_batch_with_indices(5)[0]) == [
        (x, k) for x in range(150) if x not in BAD for k in range(x % 3)][:10]
    memory_parent = FlatMapSource(parent(), copies, max_outputs=2)
    memory_parent.get_batch_with_indices(2)
    memory_parent.close_epoch()  # a parent with no read-ahead of its own: nothing to stop
    assert pairs(memory_parent.get_batch_with_indices(2)[0]) == [(2, 1), (4, 0)]


def test_nnx_update_rewinding_the_same_source_reads_its_stream_parent_again():
    """The parent's position put back by nnx.update says nothing of where its pass stands:
    the first read after the rewind moves it there (an empty pass before: the parent's
    stream pass, at its end, was read on from there)."""
    def expand(record):
        return [record, record] if int(record["x"]) % 2 else [record]

    source = FlatMapSource(ConcatSource([NumberStream(0, 5), numbers(10, 14)]), expand,
                           max_outputs=2)
    start = nnx.clone(nnx.state(source))
    whole = read(source, 3)
    assert flat(whole) == [0, 1, 1, 2, 3, 3, 4, 10, 11, 11, 12, 13, 13]
    nnx.update(source, start)  # the same source, back at its start
    assert read(source, 3) == whole


class OnePass(StreamSource):
    """A generator read once: no restart(self, epoch)."""

    def __init__(self, n: int) -> None:
        super().__init__(MemorySourceConfig())
        self.records = iter(range(n))

    def get_batch(self, batch_size):
        r = [v for _, v in zip(range(batch_size), self.records)]
        return {"r": np.asarray(r, np.int32)} if r else None

    def element_spec(self):
        return {"r": jax.ShapeDtypeStruct((), np.int32)}


@pytest.mark.parametrize("nested", [False, True])
def test_a_parent_stream_without_restart_is_refused_when_built(nested):
    """FlatMapSource reads its parent's first records to learn its spec, then reads the
    pass from its start: a stream that cannot read it twice (alone or inside a
    concatenation) is refused when built, naming it, before anything is read."""
    stream = OnePass(5)
    source = ConcatSource([parent(2), stream]) if nested else stream
    with pytest.raises(ConfigError, match="without restart") as error:
        FlatMapSource(source, lambda r: [r], max_outputs=1)
    where = "ConcatSource child 1: OnePass" if nested else "parent OnePass"
    assert where in str(error.value) and "Implement restart(self, epoch) in" in str(error.value)
    assert next(stream.records) == 0  # nothing was read
    ok = FlatMapSource(NumberStream(0, 5, field="r"), lambda r: [r], max_outputs=1)
    assert flat(read(ok, 2, lambda b, s: b["r"].tolist())) == [0, 1, 2, 3, 4]
