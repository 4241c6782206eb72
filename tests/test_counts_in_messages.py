"""Messages that name a count say ``1 record`` / ``2 records`` (``count_words``), and read
as sentences either way."""

from __future__ import annotations

import pytest

from datarax.core.errors import ConfigError
from datarax.dataset.placement import ShardPlan
from datarax.dataset.write_outcome import ConversionError
from datarax.pipeline.fused import check_train_step
from datarax.sources import ConcatSource

from number_sources import NumberStream, numbers


def test_a_train_step_refused_for_one_module_says_one_module_and_two_arguments():
    def train_step(batch):
        return batch

    with pytest.raises(ConfigError, match=r"here 1 module then the batch, 2 positional "
                       r"arguments, but train_step\(batch\) cannot take them"):
        check_train_step(train_step, (object(),))


def test_a_numbered_row_outside_a_one_record_dataset_says_it_holds_one_record():
    with pytest.raises(ConversionError, match=r"row 3 is outside 0\.\.0 \(the dataset holds "
                       r"1 record; rows number them 0\.\.n-1\)"):
        ShardPlan(1, (0, 1)).shard_of(3)


def test_concat_locate_names_its_one_record_or_says_a_part_is_a_stream():
    with pytest.raises(IndexError, match="^ConcatSource position 1 is outside its 1 record$"):
        ConcatSource([numbers(0, 1)]).locate(1)
    with pytest.raises(IndexError, match="^ConcatSource position 0 has no place: a part's "
                       r"length is not known \(a stream\)$"):
        ConcatSource([numbers(0, 3), NumberStream(3, 5)]).locate(0)
