"""A source of one's own whose config declares ``on_error`` (without the
``BadRecordFields`` mixin) gets that policy, not a silent ``"raise"``."""

from __future__ import annotations

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
