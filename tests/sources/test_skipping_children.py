"""Children that skip bad records (``on_error="skip"``, counted in their positions) under
an interleave, a shuffle buffer and a mixture: every good record once a pass, each bad
one skipped once, exact resume at every batch boundary of two epochs (each skip budget
continuing exactly, a budget exceeded raising at the same batch), and the one case that
cannot be exact (sampling with replacement) refused naming what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from datarax.core.errors import SourceContractError
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    InterleaveSource,
    MemorySource,
    MemorySourceConfig,
    MixSource,
    ShuffleBufferSource,
)

from bad_rows import Rows, RowsConfig
from source_reads import two_epochs

GOOD = [0, 1, 4, 5, 6, 7, 8]  # of the skipping child: records 2, 3 and 9 do not decode


def skipping(budget: int | None = 3) -> Rows:
    return Rows(RowsConfig(on_error="skip", max_skipped=budget), 10, bad={2, 3, 9})


def others() -> MemorySource:
    return MemorySource(MemorySourceConfig(), {"x": np.arange(100, 106, dtype=np.float32)})


def interleave(budget: int | None = 3) -> Pipeline:
    source = InterleaveSource([skipping(budget), others()], cycle_length=2, block_length=2)
    return Pipeline(source=source, stages=[], batch_size=3)


def shuffle_buffer(budget: int | None = 3) -> Pipeline:
    source = ShuffleBufferSource(skipping(budget), buffer_size=4, seed=1)
    return Pipeline(source=source, stages=[], batch_size=3)


def mixture(budget: int | None = 3) -> Pipeline:
    source = MixSource({"a": skipping(budget), "b": others()}, weights={"a": 2, "b": 1})
    return Pipeline(source=source, stages=[], batch_size=4)


BUILDS = {"interleave": interleave, "shuffle_buffer": shuffle_buffer, "mixture": mixture}


def resumes_at_every_boundary(build: Callable[..., Pipeline], budget: int | None = 3,
                              ) -> tuple[list[Any], list[Any]]:
    """Two epochs of ``build(budget)`` and each state after a batch restored into a fresh
    one: the same batches (and error) after it. Returns the batches and the states."""
    states: list[Any] = []
    whole = two_epochs(build(budget), states)
    for k, state in enumerate(states):
        resumed = build(budget)
        resumed.set_state(state)
        assert whole[:k + 1] + two_epochs(resumed) == whole, f"resumed after batch {k}"
    return whole, states


def test_an_interleave_serves_each_good_record_once_a_pass_and_resumes_exactly():
    whole, states = resumes_at_every_boundary(interleave)
    epoch = [[0, 1, 100], [101, 4, 5], [102, 103, 6], [7, 104, 105], [8]]
    assert whole == 2 * epoch
    # the cursor keeps each open child's count of records taken; a skipping child is
    # read again up to it on a restore (the slots: child 0 at 6 records, child 1 at 6)
    assert states[3]["source"]["cursor"] == [2, 0, 0, 0, 6, 1, 6]


def test_a_shuffle_buffer_shuffles_the_good_records_within_windows_and_resumes_exactly():
    whole, _ = resumes_at_every_boundary(shuffle_buffer)
    passes = [sum(whole[:3], []), sum(whole[3:], [])]
    for served in passes:  # windows of 4 good records: [0 1 4 5] [6 7 8 -]
        assert sorted(served[:4]) == [0, 1, 4, 5] and sorted(served[4:]) == [6, 7, 8]
    assert passes[0] != passes[1]  # each pass its own order


def test_a_mixture_reads_a_skipping_source_by_passes_and_resumes_exactly():
    whole, states = resumes_at_every_boundary(mixture)
    served = sum(whole, [])
    from_a = [x for x in served if x < 100]
    assert from_a[:7] == GOOD and from_a[7:14] == GOOD  # its passes, each bad record skipped
    assert len(served) == 2 * 16 and sorted(x for x in served if x >= 100)[:2] == [100, 100]
    # the state keeps where the skipping source's current pass began (its draw 7)
    assert [s["source"]["stream_passes"] for s in states[:3]] == [
        {"a": [0, 0]}, {"a": [0, 0]}, {"a": [1, 7]}]


CHILD = {"interleave": lambda s: s.children[0], "shuffle_buffer": lambda s: s.source,
         "mixture": lambda s: s.sources[0]}


@pytest.mark.parametrize("kind", sorted(BUILDS))
def test_each_bad_record_is_skipped_once_a_pass_and_counted_in_the_childs_state(kind):
    pipeline = BUILDS[kind]()
    for _ in pipeline:
        pass
    child = CHILD[kind](pipeline.source)
    if kind == "mixture":  # 11 draws of its 7 good records: into its second pass
        assert child.skip_state() == {"skipped": 2}
        assert [r.index for r in child.skipped_records()] == [2, 3, 9, 2, 3]
    else:
        assert child.skip_state() == {"skipped": 3}
        assert [r.index for r in child.skipped_records()] == [2, 3, 9]


@pytest.mark.parametrize("kind", sorted(BUILDS))
def test_a_skip_budget_exceeded_raises_at_the_same_batch_after_any_resume(kind):
    whole, _ = resumes_at_every_boundary(BUILDS[kind], budget=2)
    assert whole[-1].startswith("RecordError: Rows: skipped 3 bad records in epoch 0, over "
                                "the budget of 2")
    assert all(isinstance(batch, list) for batch in whole[:-1])


def concat_of_skipping_parts() -> ConcatSource:
    """Parts with a budget of 2 each, both met exactly: only counts by part keep them."""
    return ConcatSource([
        Rows(RowsConfig(on_error="skip", max_skipped=2), 6, bad={1, 2}),
        Rows(RowsConfig(on_error="skip", max_skipped=2), 6, bad={0, 5}, offset=10)])


def test_a_child_with_budgets_by_part_continues_each_budget_exactly():
    def build(_budget: Any) -> Pipeline:
        source = InterleaveSource([concat_of_skipping_parts(), others()], cycle_length=2,
                                  block_length=3)
        return Pipeline(source=source, stages=[], batch_size=2)

    whole, _ = resumes_at_every_boundary(build)
    epoch = sum(whole[:len(whole) // 2], [])
    assert epoch == [0, 3, 4, 100, 101, 102, 5, 11, 12, 103, 104, 105, 13, 14]
    assert whole[:len(whole) // 2] == whole[len(whole) // 2:]


def test_sampling_with_replacement_refuses_a_skipping_source_naming_what_to_do():
    with pytest.raises(SourceContractError) as err:
        MixSource({"a": skipping(), "b": others()}, weights={"a": 1, "b": 1}, mode="sampling")
    assert str(err.value) == (
        "MixSource source 'a' skips bad records (on_error='skip'); sampling with replacement "
        "reads each draw's record by its number, so a record skipped as bad would leave its "
        "draw unserved. Use mode='epoch' (read in order, the bad record skipped once), or "
        "on_error='raise' and scan and fix the data first.")


def test_a_shuffled_array_record_source_that_skips_resumes_exactly_under_each(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import write_int_parts

    from datarax.sources import ArrayRecordSourceModule

    paths = write_int_parts(tmp_path, [7, 20])
    bad = {3, 11, 17}

    def decode(record: bytes) -> dict[str, np.ndarray]:
        value = np.frombuffer(record, np.int32)[0]
        if int(value) in bad:
            raise ValueError(f"record {value} is broken")
        return {"x": value.astype(np.float32)}

    def child() -> ArrayRecordSourceModule:
        return ArrayRecordSourceModule(paths=paths, decode=decode, seed=5, shuffle_files=True,
                                       on_error="skip", max_skipped=3, num_threads=2)

    builds = {
        "interleave": lambda _b: Pipeline(source=InterleaveSource(
            [child(), others()], cycle_length=2, block_length=4), stages=[], batch_size=5),
        "mixture": lambda _b: Pipeline(source=MixSource(
            {"a": child(), "b": others()}, weights={"a": 3, "b": 1}), stages=[], batch_size=5),
    }
    for kind, build in builds.items():
        whole, _ = resumes_at_every_boundary(build)
        served = [x for x in sum(whole, []) if x < 100]
        if kind == "interleave":  # each pass: the 17 good records once, shuffled anew
            half = len(served) // 2
            assert sorted(served[:half]) == sorted(served[half:]) == sorted(set(range(20)) - bad)
            assert served[:half] != served[half:]
        else:
            assert not set(served) & bad and len(set(served[:17])) == 17
