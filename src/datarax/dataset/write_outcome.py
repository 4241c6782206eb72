"""What a dataset write gives back: a :class:`WriteSummary`, or a :class:`ConversionError`
(a bad record worded by :func:`bad_record_message`), for the local and the Beam writer.

Example:
    >>> print(WriteSummary(10, 2_000_000, 2, 0, 1, 0.5))
    10 records, 2.0 MB in 2 shards (0 resumed), 1 row skipped, 0.5 s (20 records/s)
"""

from __future__ import annotations

import dataclasses

from datarax.dataset.fields import RecordMismatchError
from datarax.errors import DataraxError
from datarax.host.counts import count_words

__all__ = ["ConversionError", "WriteSummary", "bad_record_message"]


class ConversionError(DataraxError):
    """A conversion stopped: a bad record (its row and field named), a failed worker,
    or a destination that is in the way."""


@dataclasses.dataclass(frozen=True)
class WriteSummary:
    """What a write did: records, bytes, shards written (and skipped as already done), time."""

    records: int
    bytes: int
    shards: int
    shards_resumed: int
    skipped_rows: int
    seconds: float

    def __str__(self) -> str:
        head = (f"{count_words(self.records, 'record')}, {self.bytes / 1e6:.1f} MB in "
                f"{count_words(self.shards, 'shard')}")
        if self.shards and self.shards_resumed == self.shards:
            return f"{head}, already complete (nothing written)"
        rate = self.records / self.seconds if self.seconds > 0 else float("inf")
        return (f"{head} ({self.shards_resumed} resumed), {count_words(self.skipped_rows, 'row')} "
                f"skipped, {self.seconds:.1f} s ({rate:,.0f} records/s)")


def bad_record_message(message: str, err: RecordMismatchError, what: str = "row") -> str:
    """The error for a record that does not match the features: ``message`` (where and
    what), how to declare a field whose shape or dtype varies, and how to skip it."""
    first = "first row" if what == "row" else "record with the smallest key"
    hint = (f" (The features are inferred from the {first} unless given with features=: "
            "declare a field whose shape or dtype varies, with None for a dimension that varies.)"
            if err.mismatch else "")
    return (f"{message}{hint} Fix the source {what}, or pass on_error='skip' (--on-error skip) "
            "to leave it out and list it in the metadata.")
