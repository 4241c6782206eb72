"""A sharded stream whose pass is shorter than one round of shards is refused, not
served as empty epochs on every process (its records silently dropped)."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.pipeline import Pipeline
from number_sources import NumberStream


def _pipeline(records: int, index: int, count: int) -> Pipeline:
    return Pipeline(source=NumberStream(0, records), batch_size=2, shard_index=index,
                    shard_count=count)


@pytest.mark.parametrize("index", [0, 6])
def test_a_pass_shorter_than_a_round_is_refused_on_every_process(index: int) -> None:
    message = (r"^NumberStream is read by 7 processes \(shard_count=7\) but its pass holds 5 "
               r"records: .* Use at most 5 processes")
    with pytest.raises(ConfigError, match=message):
        list(_pipeline(5, index, 7))


def test_a_pass_of_one_round_and_a_partial_one_serves_the_whole_round() -> None:
    served = [[int(v) for b in _pipeline(9, i, 7) for v in np.asarray(b["x"])] for i in range(7)]
    assert served == [[i] for i in range(7)]  # records 7 and 8 (a partial round) left out


def test_a_stream_of_no_records_is_still_an_empty_pass() -> None:
    assert list(_pipeline(0, 1, 2)) == []
