"""A record skipped under on_error="skip" is listed once in ``skipped_records()``, however
often a failed batch is read again; the saved count restarts with the position."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import SpecMismatchError
from datarax.pipeline import Pipeline
from datarax.sources.skip_ledger import ErrorPolicy, SkipLedger, SkippedRecord
from datarax.testing import json_round_trip

from bad_rows import Rows, RowsConfig


def bad(epoch: int, position: int) -> SkippedRecord:
    return SkippedRecord(epoch, position, position, None, position, "bad bytes")


def test_the_ledger_lists_a_record_read_again_once():
    ledger = SkipLedger(ErrorPolicy("skip"), name="T")
    for _ in range(3):  # the same batch read three times (a rewind begins it again)
        ledger.begin(0)
        ledger.pull(bad(0, 5), epoch_size=20)
        ledger.commit(8)
        assert ledger.skipped == 1
    assert [r.position for r in ledger.reports] == [5] and ledger.total == 1
    ledger.pull(bad(0, 9), epoch_size=20)  # a new one in the same session is listed
    ledger.commit(12)
    assert [r.position for r in ledger.reports] == [5, 9] and ledger.total == 2
    ledger.begin(1)  # the next epoch meets the same record: a new skip
    ledger.pull(bad(1, 5), epoch_size=20)
    ledger.commit(20)
    assert [(r.epoch, r.position) for r in ledger.reports] == [(0, 5), (0, 9), (1, 5)]


def test_positions_a_session_jumped_over_are_not_taken_as_reported():
    ledger = SkipLedger(ErrorPolicy("skip"), name="T")
    ledger.begin(0, skipped=0)  # resumed at position 10 (a restored state)
    ledger.pull(bad(0, 12), epoch_size=20)
    ledger.commit(14)
    ledger.begin(0)  # back to the start: 3 was never read, 12 was
    for p in (3, 12):
        ledger.pull(bad(0, p), epoch_size=20)
    ledger.commit(20)
    assert [r.position for r in ledger.reports] == [12, 3]
    assert ledger.skipped == 2 and ledger.total == 2


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_retried_batch_lists_its_skipped_record_once(prefetch):
    source = Rows(RowsConfig(on_error="skip", max_skipped=1), bad={5}, nan={7})
    it = iter(Pipeline(source=source, stages=[], batch_size=4, check_finite=True,
                       prefetch=prefetch))
    assert np.asarray(next(it)["x"]).tolist() == [0, 1, 2, 3]
    for _ in range(3):
        with pytest.raises(SpecMismatchError, match="NaN"):
            next(it)
        assert source.get_state()["skipped"] == 0
    source.nan.clear()
    assert [np.asarray(b["x"]).tolist() for b in it] == [[4, 6, 7, 8], [9, 10, 11, 12],
                                                         [13, 14, 15]]
    assert [(r.epoch, r.position, r.cause) for r in source.skipped_records()] == [
        (0, 5, "ValueError: record 5 is broken")
    ]
    assert source.host_reader.ledger.total == 1


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_broken_skip_budget_raises_at_the_batch_that_passes_the_record(tmp_path, prefetch):
    """The reader reads ahead of the loop; the over-budget error still comes with the
    batch that would pass the bad record, after every batch before it (it came as soon
    as the read-ahead met the record, batches early), and a retry or a resume meets it
    there again."""
    from datarax.core.errors import RecordError
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    from int_record_files import write_int_parts

    paths = write_int_parts(tmp_path, [10, 24])

    def decode(record):
        i = int(np.frombuffer(record, np.int32)[0])
        if i in (5, 17):
            raise ValueError(f"bad record {i}")
        return {"x": np.int32(i)}

    def build():
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip", max_skipped=1),
                                         paths=paths, decode=decode)
        return Pipeline(source=source, stages=[], batch_size=3, prefetch=prefetch)

    pipeline, served = build(), []
    with pytest.raises(RecordError, match=r"skipped 2 bad records in epoch 0, over the "
                       r"budget of 1 .* Latest: record 7 of file '.*part-1.array_record'"):
        for batch in pipeline:
            served.append(np.asarray(batch["x"]).tolist())
    assert served == [[0, 1, 2], [3, 4, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    state = json_round_trip(pipeline.get_state())
    assert (state["position"], state["source"]["skipped"]) == (16, 1)
    with pytest.raises(RecordError, match="over the budget of 1"):
        next(iter(pipeline))  # a retry meets it at the same batch
    resumed = build()
    resumed.set_state(state)
    with pytest.raises(RecordError, match="skipped 2 bad records"):
        next(iter(resumed))
    pipeline.source.close()
    resumed.source.close()
