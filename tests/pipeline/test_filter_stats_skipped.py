"""``stats()["filter"]`` holds the predicate's verdicts: records a source skipped as bad
(``on_error="skip"``) got none, so they count neither as kept nor as dropped (they are
in ``source.skipped_records()``)."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import (
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    ConcatSource,
    MemorySource,
    MemorySourceConfig,
)

from int_record_files import write_int_parts

BAD = {4, 15}


def decode(record: bytes) -> dict:
    i = int(np.frombuffer(record, np.int32)[0])
    if i in BAD:
        raise ValueError(f"bad record {i}")
    return {"id": np.int32(i)}


def not_one_mod_three(element):
    return element.data["id"] % 3 != 1


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("concat", [False, True])
def test_records_skipped_as_bad_are_not_counted_as_dropped(tmp_path, prefetch, concat):
    paths = write_int_parts(tmp_path, [7, 13, 20])  # ids 0..19, 4 and 15 bad
    source = records = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(shuffle_files=True, seed=2, on_error="skip"),
        paths=paths, decode=decode)
    good = sorted(set(range(20)) - BAD)
    if concat:
        source = ConcatSource([source, MemorySource(MemorySourceConfig(),
                                                    {"id": np.arange(100, 105, dtype=np.int32)})])
        good += list(range(100, 105))
    pipeline = Pipeline(source=source, stages=[FilterOperator(predicate=not_one_mod_three)],
                        batch_size=4, prefetch=prefetch)
    kept = sorted(int(i) for batch in pipeline for i in np.asarray(batch["id"]))
    assert kept == [i for i in good if i % 3 != 1]
    assert pipeline.stats()["filter"] == {"kept": len(kept), "dropped": len(good) - len(kept)}
    assert len(records.skipped_records()) == 2
    source.close()
