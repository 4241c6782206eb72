"""A stage maps each record of a batch to one record: one that changes how many records
the batch holds is refused, naming it, on every path."""

import numpy as np
import pytest

from datarax.core.errors import DataraxError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


@pytest.mark.parametrize("text", [False, True], ids=["indexed", "host"])
def test_a_stage_that_changes_the_number_of_records_is_refused_naming_it(text):
    data = {"x": np.arange(10, dtype=np.int32)}
    if text:
        data["t"] = [str(i) for i in range(10)]

    def first_two(batch):
        return {**batch, "x": batch["x"][:2]}

    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), data),
                        stages=[lambda b: b, first_two], batch_size=4)
    with pytest.raises(DataraxError, match=r"^Pipeline stage 1 \(first_two\) was given a batch of 4 "
                       r"records and returned fields with 2 along the first axis; a stage maps "
                       r"each record to one record\. Drop records with FilterOperator"):
        next(iter(pipeline))


def test_a_stage_may_add_a_batch_level_scalar():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    pipeline = Pipeline(source=source, stages=[lambda b: {**b, "total": b["x"].sum()}],
                        batch_size=4)
    assert [int(b["total"]) for b in pipeline] == [6, 9]
