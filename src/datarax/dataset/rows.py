"""Rows: what the writer reads records from, whatever holds them.

A :class:`Rows` hands out records (dicts of field values) by row number:
``iter_rows(start, stop)`` yields rows ``start .. stop - 1`` in order; ``length`` is the
number of rows (None when unknown until the end); ``hints`` gives per field an
``encoding`` and/or ``class_names`` the data's own schema declares (a Hugging Face
``ClassLabel`` or ``Image``, a TFDS feature). :func:`as_rows` wraps a list, any
random-access sequence (``__len__`` + ``__getitem__``), a Hugging Face ``Dataset``, a
datarax source or a plain iterable; file readers (Parquet, image folders ...) live in
:mod:`datarax.dataset.conversion`.

Example:
    >>> rows = as_rows([{"x": 1}, {"x": 2}, {"x": 3}])
    >>> rows.length, [r["x"] for r in rows.iter_rows(1, 3)]
    (3, [2, 3])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.errors import ConfigError

__all__ = ["HFRows", "IterableRows", "Rows", "SequenceRows", "as_rows", "hf_hints"]


class Rows:
    """Base of every row reader (see the module docstring)."""

    length: int | None = None
    description: str = "records"
    #: whether worker processes may each open a copy (it pickles, and reads any range)
    random_access: bool = True

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        raise NotImplementedError

    def hints(self) -> dict[str, dict[str, Any]]:
        return {}

    def row_name(self, row: int) -> str:
        """How errors name ``row`` (a file reader may add the file)."""
        return f"row {row}"


class SequenceRows(Rows):
    """Rows of a sequence (a list of dicts, a TFDS data source, ...): ``rows[i]``."""

    def __init__(self, rows: Any, description: str = "a sequence of records") -> None:
        self.rows = rows
        self.length = len(rows)
        self.description = description

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        for i in range(start, stop):
            yield self.rows[i]


class IterableRows(Rows):
    """Rows of a one-pass iterable, read forward only (one process)."""

    random_access = False

    def __init__(self, rows: Iterable[Any], length: int | None = None,
                 description: str = "an iterable of records") -> None:
        self._iter = iter(rows)
        self._at = 0
        self._first: Any = None
        self.length = length
        self.description = description

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("rows of a one-pass iterable cannot go to worker processes")

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        if start == 0 and self._at == 1 and self._first is not None and stop != 0:
            yield self._first  # the row the features were inferred from
            start = 1
        if start < self._at:
            raise ConfigError(
                f"{self.description} can be read once, forward: row {start} was already passed.")
        for _ in itertools.islice(self._iter, start - self._at):
            self._at += 1
        while stop is None or self._at < stop:
            try:
                row = next(self._iter)
            except StopIteration:
                return
            if self._at == 0:
                self._first = row
            self._at += 1
            yield row


def hf_hints(features: Any) -> dict[str, dict[str, Any]]:
    """Encodings and class names from Hugging Face ``Features`` (or their JSON dict)."""
    out: dict[str, dict[str, Any]] = {}
    items = features.items() if isinstance(features, Mapping) else []
    for name, feature in items:
        kind = feature.get("_type") if isinstance(feature, Mapping) else type(feature).__name__
        if kind == "ClassLabel":
            names = feature.get("names") if isinstance(feature, Mapping) else feature.names
            if names:
                out[name] = {"class_names": list(names)}
        elif kind == "Image":
            out[name] = {"image": True}
        elif kind == "Value":
            dtype = feature.get("dtype") if isinstance(feature, Mapping) else feature.dtype
            if dtype in ("string", "large_string"):
                out[name] = {"encoding": "utf8"}
    return out


class HFRows(Rows):
    """Rows of a Hugging Face ``datasets.Dataset`` (images kept as their encoded bytes)."""

    def __init__(self, dataset: Any, description: str = "a Hugging Face dataset") -> None:
        import datasets

        self._hints = hf_hints(dataset.features)
        for name, hint in self._hints.items():
            if hint.get("image"):
                dataset = dataset.cast_column(name, datasets.Image(decode=False))
        self.dataset = dataset
        self.length = len(dataset)
        self.description = description

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        step = 1000
        for lo in range(start, stop, step):
            batch = self.dataset[lo:min(stop, lo + step)]
            names = list(batch)
            for values in zip(*(batch[n] for n in names)):
                yield dict(zip(names, values))

    def hints(self) -> dict[str, dict[str, Any]]:
        return self._hints


class _SourceRows(Rows):
    """Rows of a datarax source: one pass of its records, as numpy values."""

    random_access = False

    def __init__(self, source: Any) -> None:
        self.source = source
        self.length = len(source)
        self.description = f"the datarax source {type(source).__name__}"
        self._pass: IterableRows | None = None

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a datarax source is read in this process")

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        if hasattr(self.source, "read_records") and hasattr(self.source, "decode"):
            for i in range(start, stop):  # a random-access source: stable order
                yield self.source.decode(self.source.read_records([i])[0])
            return
        if self._pass is None:  # one pass of its records, in its order, read forward
            records = itertools.islice(iter(self.source), self.length)
            self._pass = IterableRows(
                ({k: (v if isinstance(v, (str, bytes)) else np.asarray(v)) for k, v in r.items()}
                 for r in records), self.length, self.description)
        yield from self._pass.iter_rows(start, stop)


def as_rows(records: Any) -> Rows:
    """The :class:`Rows` for ``records`` (see the module docstring)."""
    if isinstance(records, Rows):
        return records
    module = type(records).__module__ or ""
    if module.startswith("datasets.") and hasattr(records, "features") and hasattr(records, "cast_column"):
        return HFRows(records)
    if module.startswith("datasets."):
        raise ConfigError(
            f"write_dataset takes a Hugging Face Dataset (one split), got {type(records).__name__}; "
            "pick a split, e.g. dataset['train'].")
    if hasattr(records, "element_spec") and hasattr(records, "get_state") and hasattr(records, "__len__"):
        return _SourceRows(records)
    if isinstance(records, Mapping):
        raise ConfigError(
            "write_dataset takes records (an iterable of dicts), got one dict; wrap it in a list.")
    if isinstance(records, Sequence) or (hasattr(records, "__len__") and hasattr(records, "__getitem__")):
        return SequenceRows(records)
    if isinstance(records, Iterable):
        return IterableRows(records)
    raise ConfigError(
        f"write_dataset cannot read records from a {type(records).__name__}; give an iterable of "
        "dicts, a Hugging Face Dataset split, a TFDS data source or a datarax source.")
