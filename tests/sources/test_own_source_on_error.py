"""A source of one's own whose config declares ``on_error`` (without the
``BadRecordFields`` mixin) gets that policy, not a silent ``"raise"``; one whose config
lacks the field is told how to add it, not to pass an argument it cannot take."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import RandomAccessSource


@dataclass(frozen=True)
class LinesConfig(StructuralConfig):
    on_error: str = "raise"
    max_skipped: int | None = None


class Lines(RandomAccessSource):
    """Six text lines, one of them not a number."""

    LINES = ["0", "1", "two", "3", "4", "5"]

    def __len__(self):
        return len(self.LINES)

    def read_records(self, indices):
        return [self.LINES[i] for i in indices]

    def decode(self, raw):
        return {"x": np.int32(int(raw))}


@dataclass(frozen=True)
class BareLinesConfig(StructuralConfig):
    """No on_error field."""


class BareLines(Lines):
    """Lines with a config of no on_error; line 4 has two values (another shape)."""

    def decode(self, raw):
        return {"x": np.int32([int(raw)] * (2 if raw == "4" else 1))}


def _values(source):
    return sum((np.asarray(b["x"]).tolist() for b in Pipeline(source=source, stages=[],
                                                                batch_size=4)), [])


def test_a_plain_config_with_on_error_skip_skips_and_counts():
    source = Lines(LinesConfig(on_error="skip"))
    assert _values(source) == [0, 1, 3, 4, 5]
    assert [r.index for r in source.skipped_records()] == [2]
    source.close()


def test_a_plain_config_with_on_error_raise_raises_naming_the_record():
    source = Lines(LinesConfig())
    with pytest.raises(RecordError, match="record 2"):
        _values(source)
    source.close()


def test_a_plain_config_budget_is_kept_and_a_bad_policy_names_the_config():
    source = Lines(LinesConfig(on_error="skip", max_skipped=0))
    with pytest.raises(RecordError):
        _values(source)
    source.close()
    with pytest.raises(ConfigError, match="LinesConfig"):
        Lines(LinesConfig(on_error="skp")).error_policy()


def test_the_skip_hint_says_on_error_skip_where_the_config_has_the_field():
    source = Lines(LinesConfig())
    with pytest.raises(RecordError) as caught:
        _values(source)
    source.close()
    assert str(caught.value).endswith(
        "or construct the source with on_error='skip' to drop bad records (they are "
        "counted and reported).")


def test_the_skip_hint_says_how_to_add_on_error_where_the_config_lacks_it():
    add = ("give BareLinesConfig an on_error field (mix in "
           "datarax.sources.random_access.BadRecordFields) and construct the source with "
           "on_error='skip' to drop")
    source = BareLines(BareLinesConfig())
    with pytest.raises(RecordError) as caught:  # the pass stops at line 2 ("two")
        _values(source)
    source.close()
    assert "cannot read record 2 (epoch 0): ValueError" in str(caught.value)
    assert add + " bad records" in str(caught.value)
    with pytest.raises(RecordError) as caught:  # by index: line 4, another shape
        BareLines(BareLinesConfig())[4]
    assert "every record must decode to the same shapes" in str(caught.value)
    assert add + " such records" in str(caught.value)
    assert "or construct the source" not in str(caught.value)


def test_an_index_past_a_one_record_source_says_one_record():
    class OneLine(Lines):
        LINES = ["0"]

    with pytest.raises(IndexError, match=r"OneLine index 1 is out of range for 1 record\.$"):
        OneLine(LinesConfig())[1]


class OutOfFiles(Lines):
    """Six numbers; reading record 3 meets a process with every file descriptor taken."""

    LINES = ["0", "1", "2", "3", "4", "5"]

    def read_records(self, indices):
        if 3 in indices:
            raise OSError(errno.EMFILE, "Too many open files", "/data/3.txt")
        return super().read_records(indices)


def test_out_of_file_descriptors_is_raised_not_skipped():
    # the process's limit, not a bad record: on_error="skip" must not drop the record
    source = OutOfFiles(LinesConfig(on_error="skip"))
    batches = iter(Pipeline(source=source, stages=[], batch_size=2))
    assert np.asarray(next(batches)["x"]).tolist() == [0, 1]
    with pytest.raises(RecordError, match=r"record 3 .*Too many open files.* The file is fine"):
        next(batches)
    assert list(source.skipped_records()) == []
    source.close()
