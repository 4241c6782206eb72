"""Rows: what the writer reads records from, whatever holds them.

A :class:`Rows` yields records (dicts of field values) by row number
(``iter_rows(start, stop)``), knows its ``length`` (None until the end, for a stream) and
gives ``hints`` per field from the data's own schema: an ``encoding``, ``class_names``,
and for a list column its ``shape`` and ``dtype`` over every row (:func:`list_hint`).
:func:`as_rows` wraps a sequence, a Hugging Face ``Dataset`` or ``IterableDataset``, a
datarax source or a plain iterable; file readers live in :mod:`datarax.dataset.conversion`.

Example:
    >>> rows = as_rows([{"x": 1}, {"x": 2}, {"x": 3}])
    >>> rows.length, [r["x"] for r in rows.iter_rows(1, 3)]
    (3, [2, 3])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.dataset.categories import frame_categories, frame_records
from datarax.dataset.image_header_columns import image_column_sizes
from datarax.dataset.images import ImageSizes, alpha_unused, arrow_images
from datarax.errors import ConfigError
from datarax.host.dtypes import is_text_scalar

__all__ = ["DataFrameRows", "HFIterableRows", "HFRows", "IterableRows", "Rows", "SequenceRows",
           "as_rows", "check_own_class_names",
           "feature_hints", "files_description", "list_hint", "list_hints"]


class Rows:
    """Base of every row reader (see the module docstring)."""

    length: int | None = None
    description: str = "records"
    #: whether worker processes may each open a copy (it pickles, and reads any range)
    random_access: bool = True
    #: whether :meth:`hints` reads every row, in parts that :meth:`probe` reads (so
    #: worker processes can share that reading; :meth:`use_probes` takes their parts)
    probes_rows: bool = False
    #: what the data's own schema says of its fields (class names, an encoding)
    schema_hints: Mapping[str, Mapping[str, Any]] = {}

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        raise NotImplementedError

    def hints(self) -> Mapping[str, Mapping[str, Any]]:
        return self.schema_hints

    def tables(self, start: int, stop: int) -> Iterator[Any] | None:
        """Rows ``start..stop-1`` as consecutive ``pyarrow`` table slices; None for rows
        that are not read as columns."""
        return None

    def image_headers(self, start: int, stop: int) -> dict[str, tuple[Any, ...]] | None:
        """Image headers of rows ``start..stop-1`` read already (by a probe), by field,
        for :func:`~datarax.dataset.column_records.column_encoder`; None: none read."""
        return None

    def probe(self, start: int, stop: int) -> Any:
        """What :meth:`hints` reads of rows ``start..stop-1`` (with ``probes_rows``)."""
        raise NotImplementedError

    def use_probes(self, parts: list[Any]) -> None:
        """Take the :meth:`probe` parts of consecutive ranges covering every row, in order."""
        raise NotImplementedError

    def row_name(self, row: int) -> str:
        """How errors name ``row`` (a file reader may add the file)."""
        return f"row {row}"

    def name_classes(self, class_names: Mapping[str, Sequence[str]]) -> None:
        """Take the class names given for label fields before any row is read: rows whose
        labels come from names (an image folder's) then label by position in them; rows
        of integer labels keep theirs (:func:`check_own_class_names`)."""
        own = {name: hint["class_names"] for name, hint in self.schema_hints.items()
               if "class_names" in hint}
        check_own_class_names(self.description, own, class_names)


class SequenceRows(Rows):
    """Rows of a sequence (a list of dicts, a TFDS data source, ...): ``rows[i]``."""

    def __init__(self, rows: Any, description: str = "a sequence of records") -> None:
        self.rows = rows
        self.length = len(rows)
        self.description = description

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else min(stop, self.length)
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


def check_own_class_names(description: str, own: Mapping[str, Sequence[str]],
                          given: Mapping[str, Sequence[str]]) -> None:
    """Refuse class names ``given`` for a label field with class names of its own (``own``)
    where they would name its labels otherwise (another count, or one of its names at
    another position); new names for the same count rename the classes."""
    for field, names in given.items():
        mine, names = own.get(field), [str(n) for n in names]
        if mine is None or list(mine) == names:
            continue
        moved = [n for i, n in enumerate(mine) if n in names and names.index(n) != i]
        if moved or len(mine) != len(names):
            why = (f"'{moved[0]}' would be class {names.index(moved[0])}, not "
                   f"{list(mine).index(moved[0])}" if moved else
                   f"{len(names)} names for its {len(mine)} classes")
            raise ConfigError(
                f"{description} numbers its '{field}' labels by its own class names "
                f"({', '.join(mine)}); the class names given ({', '.join(names)}) would name them "
                f"otherwise ({why}), and its labels are written as they are. Leave out "
                "class_names= (--classes-from): its own names go with its labels.")


def files_description(kind: str, files: Sequence[str]) -> str:
    """``parquet files a.parquet (+2 more)``: how errors name the files rows come from."""
    more = f" (+{len(files) - 1} more)" if len(files) > 1 else ""
    return f"{kind} files {files[0]}{more}"


def feature_hints(features: Any) -> dict[str, dict[str, Any]]:
    """Encodings, class names, images and dimensions that vary, from Hugging Face
    ``Features`` (or their JSON dict) or a TFDS ``FeaturesDict``."""
    out: dict[str, dict[str, Any]] = {}
    for name, feature in features.items() if hasattr(features, "items") else []:
        mapping = isinstance(feature, Mapping)  # HF's JSON dict; else a feature object
        kind = feature.get("_type") if mapping else type(feature).__name__

        def get(key: str, feature: Any = feature, mapping: bool = mapping) -> Any:
            return feature.get(key) if mapping else getattr(feature, key, None)

        if kind == "ClassLabel" and get("names"):
            out[name] = {"class_names": list(get("names"))}
        elif kind == "Image":
            out[name] = {"image": True}
            shape = get("shape")
            if isinstance(shape, tuple) and None in shape[:2]:  # TFDS: images of several sizes
                out[name]["image_size"] = shape[:2]
        elif kind == "Text" or kind == "Value" and get("dtype") in ("string", "large_string"):
            out[name] = {"encoding": "utf8"}
        elif kind == "Value" and get("dtype") == "uint64":  # a Python int infers int64
            out[name] = {"shape": (), "dtype": "uint64"}
        elif isinstance(get("shape"), tuple) and None in get("shape") and get("np_dtype"):
            try:  # TFDS: a dimension that varies (a Sequence, a Tensor of shape (None, ...))
                out[name] = {"shape": get("shape"), "dtype": np.dtype(get("np_dtype")).name}
            except TypeError:  # no NumPy dtype
                pass
    return out


def _list_levels(kind: Any) -> tuple[list[int | None], Any]:
    """Per nesting level of an Arrow list type its fixed size (None: varies), and the leaf type."""
    import pyarrow as pa

    levels: list[int | None] = []
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        levels.append(kind.list_size if pa.types.is_fixed_size_list(kind) else None)
        kind = kind.value_type
    return levels, kind


def list_hints(schema: Any, arrays: Callable[[str], Iterable[Any]],
               description: str) -> dict[str, dict[str, Any]]:
    """:func:`list_hint` of each list-of-numbers column of the Arrow ``schema``
    (``arrays(name)``: the column's values in pieces); ``description`` names the rows."""
    from datarax.dataset.write_outcome import ConversionError

    out: dict[str, dict[str, Any]] = {}
    for field in schema:
        if not _list_levels(field.type)[0]:  # not a list
            continue
        try:
            hint = list_hint(field.type, arrays(field.name))
        except Exception as err:  # noqa: BLE001 - named with the rows
            raise ConversionError(f"{description}: cannot read the list column "
                                  f"'{field.name}' ({type(err).__name__}: {err}).") from err
        if hint is not None:
            out[field.name] = hint
    return out


def list_hint(kind: Any, arrays: Iterable[Any]) -> dict[str, Any] | None:
    """The shape and dtype of an Arrow list column of numbers, from all its values.

    ``kind`` is the column's Arrow type, ``arrays`` its values in pieces. A level whose
    lists all have one length gets it, else ``None``; None when ``kind`` is not a list of
    numbers.

    Example:
        >>> import pyarrow as pa
        >>> col = pa.array([[1, 2], [3], []], pa.list_(pa.int32()))
        >>> list_hint(col.type, [col])
        {'shape': (None,), 'dtype': 'int32'}
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    levels, leaf = _list_levels(kind)
    if not levels or not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)
                          or pa.types.is_boolean(leaf)):
        return None
    low: list[int | None] = [None] * len(levels)
    high: list[int | None] = [None] * len(levels)
    for array in arrays:
        for k, size in enumerate(levels):
            if size is None:
                bounds = pc.min_max(pc.list_value_length(array))
                lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
                if lo is not None:
                    low[k] = lo if low[k] is None else min(low[k], lo)
                    high[k] = hi if high[k] is None else max(high[k], hi)
            array = pc.list_flatten(array)
    shape = tuple(size if size is not None else (low[k] if low[k] is not None and low[k] == high[k]
                                                   else None)
                  for k, size in enumerate(levels))
    return {"shape": shape, "dtype": np.dtype(leaf.to_pandas_dtype()).name}


def _undecoded_images(dataset: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A Hugging Face dataset with its image columns left encoded, and its :func:`feature_hints`."""
    import datasets

    hints = feature_hints(dataset.features) if dataset.features is not None else {}
    for name, hint in hints.items():
        if hint.get("image"):
            dataset = dataset.cast_column(name, datasets.Image(decode=False))
    return dataset, hints


class HFRows(Rows):
    """Rows of a Hugging Face ``datasets.Dataset`` (images kept as their encoded bytes)."""

    def __init__(self, dataset: Any, description: str = "a Hugging Face dataset") -> None:
        self.dataset, self.schema_hints = _undecoded_images(dataset)
        self.length = len(dataset)
        self.description = description
        self._lists_done = False

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        step = 1000
        for lo in range(start, stop, step):
            batch = self.dataset[lo:min(stop, lo + step)]
            names = list(batch)
            for values in zip(*(batch[n] for n in names)):
                yield dict(zip(names, values))

    def hints(self) -> Mapping[str, Mapping[str, Any]]:
        if not self._lists_done:  # list and image columns: their shapes over every row
            self._lists_done = True
            hints = self.schema_hints = dict(self.schema_hints)
            for name, hint in list(hints.items()):
                if hint.get("image"):
                    column = self.dataset.with_format("arrow")[name]
                    hints[name] = {**hint, **ImageSizes.of(
                        image_column_sizes(chunk, []) for chunk in column.chunks).hint()}
                    if alpha_unused(arrow_images(column.chunks)):
                        hints[name]["drop_alpha"] = True  # as an image folder's
            for name, hint in list_hints(self.dataset.features.arrow_schema, lambda name: (
                    self.dataset.with_format("arrow")[name].chunks), self.description).items():
                hints[name] = {**hints.get(name, {}), **hint}
        return self.schema_hints


class HFIterableRows(IterableRows):
    """Rows of a Hugging Face ``IterableDataset`` (one pass; images as encoded bytes)."""

    def __init__(self, dataset: Any, description: str = "a Hugging Face IterableDataset") -> None:
        dataset, self.schema_hints = _undecoded_images(dataset)
        super().__init__(dataset, None, description)


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

    def hints(self) -> dict[str, dict[str, Any]]:
        """The class names of a dataset the source reads (``dataset_info``), for its label
        fields that come out of it as integers."""
        info = getattr(self.source, "dataset_info", None)
        named = {f.name: f.class_names for f in info.features.fields
                 if f.class_names is not None} if info is not None else {}
        try:  # a record 0 that does not read is named by the writer, with its policy
            first = next(iter(self.iter_rows(0, 1)), None) if named else None
        except Exception:  # noqa: BLE001
            first = None
        return {name: {"class_names": list(names)} for name, names in named.items()
                if first is not None and name in first and np.ndim(first[name]) == 0
                and np.asarray(first[name]).dtype.kind in "iu"}

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        if hasattr(self.source, "read_records") and hasattr(self.source, "decode"):
            for i in range(start, stop):  # a random-access source: stable order
                yield self.source.decode(self.source.read_records([i])[0])
            return
        if self._pass is None:  # one pass of its records, in its order, read forward
            if self.source.index:  # a pass under way: the whole of it, from its first record
                self.source.seek(self.source.epoch, 0)
            records = itertools.islice(iter(self.source), self.length)
            self._pass = IterableRows(
                ({k: (v if is_text_scalar(v) else np.asarray(v)) for k, v in r.items()}
                 for r in records), self.length, self.description)
        yield from self._pass.iter_rows(start, stop)


class DataFrameRows(Rows):
    """Rows of a pandas ``DataFrame``: one record a row (a ``category`` column as class
    labels, :mod:`~datarax.dataset.categories`)."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.length = len(frame)
        self.description = "a pandas DataFrame"
        self.categories = frame_categories(frame)  # written as class labels
        self.schema_hints = {name: {"class_names": list(names)}
                             for name, names in self.categories.items()}

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else min(stop, self.length)
        for lo in range(start, stop, 1000):
            yield from frame_records(self.frame.iloc[lo:min(stop, lo + 1000)], self.categories)


def as_rows(records: Any) -> Rows:
    """The :class:`Rows` for ``records`` (see the module docstring)."""
    if isinstance(records, Rows):
        return records
    if (type(records).__module__ or "").split(".")[0] == "pandas" and hasattr(records, "iloc"):
        if not hasattr(records, "columns"):  # a Series
            raise ConfigError("write_dataset takes records, got a pandas Series; give a "
                              "DataFrame (series.to_frame()).")
        return DataFrameRows(records)
    module = type(records).__module__ or ""
    if module.startswith("datasets.") and hasattr(records, "features") and hasattr(records, "cast_column"):
        return HFRows(records) if hasattr(records, "__len__") else HFIterableRows(records)
    if module.startswith("datasets."):
        raise ConfigError(
            f"write_dataset takes a Hugging Face Dataset (one split), got {type(records).__name__}; "
            "pick a split, e.g. dataset['train'].")
    if hasattr(records, "element_spec") and hasattr(records, "get_state"):
        from datarax.core.lengths import length_or_none  # a source: JAX is imported

        if length_or_none(records) is not None:  # a stream is read as an iterable
            return _SourceRows(records)
    if isinstance(records, Mapping):
        raise ConfigError(
            "write_dataset takes records (an iterable of dicts), got one dict: wrap one record "
            "in a list ([record]); give columns (a dict of equal-length arrays) as a pandas "
            "DataFrame, or as records: [dict(zip(columns, row)) for row in zip(*columns."
            "values())].")
    if isinstance(records, Sequence) or (hasattr(records, "__len__") and hasattr(records, "__getitem__")):
        return SequenceRows(records)
    if isinstance(records, Iterable):
        return IterableRows(records)
    raise ConfigError(
        f"write_dataset cannot read records from a {type(records).__name__}; give an iterable of "
        "dicts, a Hugging Face Dataset split, a TFDS data source or a datarax source.")
