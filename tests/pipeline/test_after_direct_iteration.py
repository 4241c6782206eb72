"""A Pipeline over a source that ``for record in source`` read to the end: its first pass
is the next epoch, whole (as after a pass of its own), not an empty rest of the epoch the
direct iteration finished. A direct read that stopped inside an epoch is still continued
(each record served once), and a state restored at an epoch's end is still an empty pass.
Direct reads that stop exactly at an epoch's end (an unbounded source read by hand) count
as a pass that ended too."""

from __future__ import annotations

import numpy as np

from int_record_files import int_source, write_int_parts
from number_sources import NumberStream, numbers
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def passes(pipeline: Pipeline, count: int) -> list[list[int]]:
    return [[int(v) for b in pipeline for v in np.asarray(b["x"])] for _ in range(count)]


def reference(make, count: int) -> list[list[int]]:
    """The first ``count`` passes of a pipeline over a fresh source."""
    return passes(Pipeline(source=make(), stages=[], batch_size=4), count)


def test_after_a_direct_pass_of_a_shuffled_memory_source_the_pipeline_serves_epoch_one():
    def make():
        return numbers(0, 10, shuffle=True, seed=3)

    source = make()
    assert [int(r["x"]) for r in source] == reference(make, 1)[0]  # epoch 0, directly
    pipeline = Pipeline(source=source, stages=[], batch_size=4)
    assert pipeline.peek()["x"].tolist() == reference(make, 2)[1][:4]
    assert passes(pipeline, 2) == reference(make, 3)[1:]  # epochs 1 and 2, whole


def test_after_direct_passes_of_an_array_record_source_the_pipeline_serves_the_next_epoch(tmp_path):
    paths = write_int_parts(tmp_path, [4, 9])

    def make():
        return int_source(paths, shuffle_files=True, seed=5, num_epochs=2)

    source = make()
    direct = [int(r["x"]) for r in source]
    assert direct == sum(reference(make, 2), [])  # epochs 0 and 1
    assert passes(Pipeline(source=source, stages=[], batch_size=4), 1) == reference(make, 3)[2:]
    source.close()


def test_after_a_direct_pass_of_a_stream_the_pipeline_serves_the_next_pass():
    source = NumberStream(0, 6, epoch_step=100)
    assert [int(r["x"]) for r in source] == list(range(6))
    assert passes(Pipeline(source=source, stages=[], batch_size=4), 1) == [list(range(100, 106))]


def test_a_direct_read_stopped_inside_the_epoch_is_continued():
    source = numbers(0, 10)
    records = iter(source)
    assert [int(next(records)["x"]) for _ in range(3)] == [0, 1, 2]
    assert passes(Pipeline(source=source, stages=[], batch_size=4), 2) == [
        list(range(3, 10)), list(range(10))]


def test_direct_reads_that_end_the_epoch_of_an_unbounded_source_count_as_a_pass_that_ended():
    def make():
        return MemorySource(MemorySourceConfig(shuffle=True, seed=2, num_epochs=-1),
                            {"x": np.arange(10, dtype=np.int32)})

    source = make()
    records = iter(source)  # unbounded: it would go on; these reads stop at the epoch's end
    first = [int(next(records)["x"]) for _ in range(10)]
    assert sorted(first) == list(range(10))
    got = passes(Pipeline(source=source, stages=[], batch_size=4), 1)
    assert got == reference(make, 2)[1:]


def test_a_position_restored_at_the_epoch_end_is_still_an_empty_pass():
    source = numbers(0, 10)
    assert len(list(source)) == 10
    source.set_state({"current_index": 10, "current_epoch": 0})  # the rest of epoch 0: none
    assert passes(Pipeline(source=source, stages=[], batch_size=4), 2) == [[], list(range(10))]
