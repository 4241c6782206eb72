"""``Rows``: a host source of numbered records, some of which do not decode or hold NaN.

Shared by the tests of skipped-record reports, of a batch read again after a failure and
of concatenated parts that skip records (``tests/conftest.py`` puts this folder on
``sys.path``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datarax.core.config import StructuralConfig
from datarax.sources.random_access import BadRecordFields, RandomAccessSource


@dataclass(frozen=True)
class RowsConfig(BadRecordFields, StructuralConfig):
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None


class Rows(RandomAccessSource):
    """Records ``{"x": offset + i}``, ``i < n``; ``bad`` ones do not decode, ``nan`` ones
    hold NaN (both by ``i``)."""

    def __init__(self, config: RowsConfig, n: int = 16, bad=(), nan=(), offset: int = 0) -> None:
        super().__init__(config, num_threads=1)
        self.n, self.offset, self.bad, self.nan = n, offset, set(bad), set(nan)

    def __len__(self) -> int:
        return self.n

    def read_records(self, indices):
        return list(indices)

    def decode(self, raw):
        if raw in self.bad:
            raise ValueError(f"record {raw} is broken")
        return {"x": np.float32(np.nan if raw in self.nan else self.offset + raw)}
