"""Where a record goes in a dataset written in parallel: its shard and its place there.

Records arriving in any order (:mod:`datarax.dataset.beam`) are placed deterministically:
numbered rows in contiguous ranges, as :func:`~datarax.dataset.writer.write_dataset`
does; otherwise by a stable key (:class:`Keyer`) to shard ``sha256(key) mod shards``, in
:func:`key_order` there.

Example:
    >>> plan = make_plan(10, 3, numbered=True, per_shard=RECORDS_PER_SHARD)
    >>> plan.bounds, [plan.shard_of(row) for row in (0, 3, 4, 9)]
    ((0, 3, 6, 10), [0, 1, 1, 2])
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from datarax.dataset.write_outcome import ConversionError
from datarax.host.counts import count_words
from datarax.host.dtypes import is_text_scalar

__all__ = ["MAX_SHARDS", "RECORDS_PER_SHARD", "Keyer", "ShardPlan", "automatic_shards",
           "key_order", "make_plan", "record_digest"]

#: automatic shard count: one shard per this many records (as ``datarax convert``), at most 1,024
RECORDS_PER_SHARD = 50_000
MAX_SHARDS = 1024


def _value_bytes(value: Any) -> bytes:
    """A stable byte form of one field value (type-tagged, length-prefixed parts)."""
    if isinstance(value, str):  # np.str_ too
        parts = [b"s", str(value).encode("utf-8", "surrogatepass")]
    elif isinstance(value, (bytes, bytearray, memoryview)):
        parts = [b"b", bytes(value)]
    elif isinstance(value, Mapping):
        parts = [b"m"] + [str(k).encode() + _value_bytes(value[k]) for k in sorted(value, key=str)]
    elif type(value).__module__.startswith("PIL."):
        parts = [b"i", value.mode.encode(), repr(value.size).encode(), value.tobytes()]
    else:
        array = np.asarray(value)
        parts = [b"a", array.dtype.str.encode(), repr(array.shape).encode(),
                 np.ascontiguousarray(array).tobytes()]
    return b"".join(len(p).to_bytes(8, "little") + p for p in parts)


def record_digest(record: Mapping[str, Any]) -> bytes:
    """A stable key of a record's contents (SHA-256 over its fields, in name order).

    Example:
        >>> record_digest({"a": 1, "b": "x"}) == record_digest({"b": "x", "a": 1})
        True
    """
    if not isinstance(record, Mapping):
        raise ConversionError(f"a record is a dict of fields, got {type(record).__name__}.")
    digest = hashlib.sha256()
    for name in sorted(record, key=str):
        digest.update(_value_bytes(str(name)) + _value_bytes(record[name]))
    return digest.digest()


def _key_bytes(key: int | str | bytes) -> bytes:
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    return b"i" + str(key).encode()


def key_order(key: int | str | bytes) -> tuple[int, int, bytes]:
    if isinstance(key, bytes):
        return (2, 0, key)
    if isinstance(key, str):
        return (1, 0, key.encode("utf-8", "surrogatepass"))
    return (0, key, b"")


@dataclasses.dataclass(frozen=True)
class Keyer:
    """``record -> (key, record)``; a key is an ``int``, ``str`` or ``bytes``."""

    key: str | Callable[[Mapping[str, Any]], Any] | None
    numbered: bool

    def __call__(self, element: Any) -> tuple[int | str | bytes, Any]:
        if self.numbered:
            if (not isinstance(element, tuple) or len(element) != 2
                    or not isinstance(element[0], (int, np.integer))):
                raise ConversionError(
                    "WriteDataset(numbered=True) takes (row, record) pairs with int rows, got "
                    f"{type(element).__name__}.")
            return int(element[0]), element[1]
        if self.key is None:
            return record_digest(element), element
        if isinstance(self.key, str):
            if not isinstance(element, Mapping):
                raise ConversionError(
                    f"WriteDataset(key={self.key!r}): a record is a dict of fields, got "
                    f"{type(element).__name__} {element!r:.80}.")
            if self.key not in element:
                raise ConversionError(
                    f"WriteDataset(key={self.key!r}): a record has no field {self.key!r} "
                    f"(fields: {sorted(element, key=str)}); give each record that field, or pass a "
                    "key function (key=lambda record: ...).")
            value = element[self.key]
        else:
            value = self.key(element)
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool) or not (isinstance(value, int) or is_text_scalar(value)):
            raise ConversionError(
                f"WriteDataset key: a record's key is {value!r} ({type(value).__name__}); keys "
                "are int, str or bytes (stable across processes and runs).")
        return value, element


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Shard count and, for numbered rows, the contiguous row ranges."""

    shards: int
    bounds: tuple[int, ...] | None

    def shard_of(self, key: int | str | bytes) -> int:
        if self.bounds is None:
            digest = hashlib.sha256(_key_bytes(key)).digest()
            return int.from_bytes(digest[:8], "little") % self.shards
        if not isinstance(key, int) or not 0 <= key < self.bounds[-1]:
            raise ConversionError(
                f"WriteDataset(numbered=True): row {key!r} is outside 0..{self.bounds[-1] - 1} "
                f"(the dataset holds {count_words(self.bounds[-1], 'record')}; rows number them "
                "0..n-1).")
        return bisect.bisect_right(self.bounds, key) - 1


def automatic_shards(count: int, per_shard: int) -> int:
    """Shards for ``count`` records: one per ``per_shard`` (at least 1, at most 1,024)."""
    return max(1, min(MAX_SHARDS, -(-count // per_shard)))


def make_plan(count: int | None, shards: int | None, numbered: bool, per_shard: int) -> ShardPlan:
    """The :class:`ShardPlan` of ``count`` records in ``shards`` (``None``: automatic)."""
    n = shards if shards is not None else automatic_shards(int(count or 0), per_shard)
    bounds = tuple(s * int(count) // n for s in range(n + 1)) if numbered else None
    return ShardPlan(n, bounds)
