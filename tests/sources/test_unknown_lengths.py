"""Sources whose length is unknown before reading: ``bool()`` is True, ``len()`` a
TypeError saying why, the same way for every combinator (``LengthIfKnown``)."""

from __future__ import annotations

import pytest

from datarax.core.lengths import length_or_none
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, FlatMapSource, InterleaveSource, ShuffleBufferSource

from number_sources import NumberStream, numbers

CASES = {
    "interleave": (lambda: InterleaveSource([numbers(0, 3), numbers(3, 5)], cycle_length=2),
                   "InterleaveSource has no length: it is read as a stream (its pass holds "
                   "every record of every child's pass, once)."),
    "shuffle buffer": (lambda: ShuffleBufferSource(numbers(0, 3), buffer_size=2),
                       "ShuffleBufferSource has no length: it is read as a stream (its pass "
                       "holds every record of the parent's pass, once)."),
    "flat map": (lambda: FlatMapSource(numbers(0, 3), lambda r: [r], max_outputs=1),
                 "FlatMapSource has no length: fn returns 0 .. max_outputs records for each "
                 "parent record, so an epoch's length is known only once it is read."),
    "concat": (lambda: ConcatSource([numbers(0, 3), NumberStream(3, 5)]),
               "ConcatSource has no length: parts [1] do not know theirs"),
    "stream": (lambda: NumberStream(0, 3),
               "NumberStream has no length: it is a stream, read forward only; len() does not "
               "read a pass to count its records (count them as you iterate)."),
    "sampling mixture": (lambda: MixSource([numbers(0, 3), numbers(3, 5)], [1, 1],
                                           mode="sampling"),
                         "MixSource has no length: it samples endlessly (mode='sampling')"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_source_of_unknown_length_is_true_and_len_says_why(name):
    build, message = CASES[name]
    source = build()
    assert bool(source) is True and length_or_none(source) is None
    with pytest.raises(TypeError) as err:
        len(source)
    assert str(err.value) == message


@pytest.mark.parametrize("name", list(CASES))
def test_len_of_a_pipeline_over_it_gives_the_sources_own_reason(name):
    build, message = CASES[name]
    pipeline = Pipeline(build(), batch_size=2)
    with pytest.raises(TypeError) as err:
        len(pipeline)
    ending = "" if message.endswith(".") else "."
    assert str(err.value) == f"len(Pipeline) is unknown: {message}{ending}"


def test_known_lengths_are_counted_through_the_same_mechanism():
    assert len(ConcatSource([numbers(0, 3), numbers(3, 5)])) == 5
    assert len(MixSource([numbers(0, 3), numbers(3, 5)], [1, 1])) == 5  # the children's sizes


def test_a_stream_is_written_as_the_records_one_pass_reads(tmp_path):
    from datarax.dataset import write_dataset

    info, _ = write_dataset(NumberStream(0, 5), tmp_path / "out")
    assert sum(shard.records for shard in info.shards) == 5
