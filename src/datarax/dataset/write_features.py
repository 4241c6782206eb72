"""The features a dataset is written with: given, or inferred from the records.

Both writers use :func:`resolve_features`, so a local write and a Beam write of the
same records describe them alike; a source's schema completes what the first record
says (class names, text stored as bytes, image columns, list columns' shapes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datarax.dataset.fields import (
    Features,
    Field,
    RecordMismatchError,
    UnstorableValueError,
    infer_features,
)
from datarax.dataset.rows import Rows, as_rows
from datarax.dataset.write_outcome import ConversionError
from datarax.errors import ConfigError

__all__ = ["name_row_classes", "resolve_features"]

_INFER_TRIES = 100  # rows tried for the features with on_error="skip"


def resolve_features(records: Any, features: Features | None = None, *,
                     class_names: Mapping[str, Sequence[str]] | None = None,
                     skip: bool = False) -> Features:
    """The :class:`~datarax.dataset.fields.Features` ``records`` are written with:
    ``features`` (plus ``class_names``), or inferred from the first record and the
    source's schema (with ``skip``: the first of the first 100 rows that describes them).

    Example:
        >>> [f.encoding for f in resolve_features([{"t": "a", "x": 1.5}]).fields]
        ['utf8', 'raw']
    """
    rows = as_rows(records)
    hints = rows.hints()
    names = {k: v["class_names"] for k, v in hints.items() if "class_names" in v}
    names.update(class_names or {})
    if features is None:
        tries = _INFER_TRIES if skip and rows.random_access else 1
        first_error: ConversionError | None = None
        tried = 0
        empty: set[str | None] = set()  # the fields with no value, while every error is one
        for row, first in enumerate(rows.iter_rows(0, tries)):
            tried += 1
            try:
                features = infer_features(first, class_names=names)
                break
            except RecordMismatchError as err:
                if first_error is None:
                    first_error = _first_row_error(rows, row, err, skip)
                    empty.add(err.field if err.missing else None)
                elif None not in empty:
                    empty = {err.field} & empty if err.missing else {None}
        if features is None:
            if first_error is not None and tried > 1:  # on_error='skip': every row tried was bad
                every = "all" if tried == rows.length else "each of the first"
                if len(empty) == 1 and None not in empty:
                    name = next(iter(empty))
                    raise ConversionError(
                        f"{rows.description}: field '{name}' has no value (a null or empty "
                        f"cell) in {every} {tried} rows, so no row can be written. Give it a "
                        "value in every row, or leave the column out of SRC (pyarrow's "
                        f"table.drop_columns(['{name}']), pandas' df.drop(columns='{name}')) "
                        "and convert again.") from first_error.__cause__
                cause = first_error.__cause__
                way = ("" if isinstance(cause, UnstorableValueError) else
                       " Fix the rows, or pass features= (a datarax.dataset.Features) to declare "
                       "every field.")
                raise ConversionError(
                    f"{rows.description}: {every} {tried} rows tried for the features (with "
                    "on_error='skip' the first good row gives them) are bad, so nothing describes "
                    f"the fields; the first, {rows.row_name(0)}: {cause}{way}") from cause
            if first_error is not None:
                raise first_error
            raise ConversionError(f"{rows.description} holds no records; nothing to write.")
        _check_class_names(class_names, features)
        return Features(tuple(_hinted(f, hints.get(f.name, {})) for f in features.fields))
    if not isinstance(features, Features):
        raise ConfigError(f"features must be a datarax.dataset.Features, got {type(features).__name__}.")
    _check_class_names(class_names, features)
    if names:
        features = Features(tuple(
            dataclasses.replace(f, class_names=tuple(names[f.name]))
            if f.name in names and f.class_names is None else f for f in features.fields))
    return features


def _first_row_error(rows: Rows, row: int, err: RecordMismatchError, skip: bool) -> ConversionError:
    """The error of ``row``, the first that could not describe the fields."""
    way = ("" if isinstance(err, UnstorableValueError) else  # features= cannot hold it
           " Fix the row, or pass features= (a datarax.dataset.Features) to declare every field"
           + (", or on_error='skip' (--on-error skip) to infer them from the next good row."
              if not skip else "."))
    error = ConversionError(f"{rows.description}, {rows.row_name(row)} (the features are "
                            f"inferred from the first row): {err}{way}")
    error.__cause__ = err
    return error


def name_row_classes(rows: Rows, features: Features | None,
                     class_names: Mapping[str, Sequence[str]] | None) -> None:
    """Hand ``rows`` the class names given before any row is read (:meth:`Rows.name_classes`)."""
    given = dict(class_names or {})
    if isinstance(features, Features):  # a field's own names win, as in resolve_features
        given.update({f.name: f.class_names for f in features.fields if f.class_names is not None})
    if given:
        rows.name_classes(given)


def _check_class_names(class_names: Mapping[str, Sequence[str]] | None, features: Features) -> None:
    unknown = [k for k in (class_names or {}) if k not in features.names]
    if unknown:
        raise ConfigError(
            f"class_names names the field '{unknown[0]}', which the records do not have (their "
            f"fields: {list(features.names)}); name a label field.")
    for name in class_names or {}:
        field = features[name]
        if field.encoding != "raw" or np.dtype(field.dtype).kind not in "iu":
            raise ConfigError(
                f"class_names names the field '{name}', which holds {field.dtype} "
                f"{field.encoding} values; class names go with integer labels 0..k-1. Store "
                "each label as the index of its name (names.index(value)).")


def _hinted(field: Field, hint: Mapping[str, Any]) -> Field:
    """``field`` as the source's schema describes it."""
    if hint.get("encoding") == "utf8" and field.encoding == "varlen" and field.dtype == "uint8":
        return dataclasses.replace(field, dtype="str", shape=(), encoding="utf8")
    if hint.get("image") and field.encoding == "raw" and field.dtype == "uint8" and (
            len(field.shape) == 3 and field.shape[2] in (1, 3, 4)):
        field = dataclasses.replace(field, encoding="png")  # decoded pixels of an image column
    if hint.get("drop_alpha") and field.encoding in ("png", "jpeg") and field.shape[2] == 4:
        field = dataclasses.replace(field, shape=(*field.shape[:2], 3))  # no image uses it
    size, channels = hint.get("image_size"), hint.get("image_channels")
    if (size is not None or channels is not None) and field.encoding in ("png", "jpeg"):
        return dataclasses.replace(field, shape=(*(size or field.shape[:2]),
                                                 max(field.shape[2], channels or 0)))
    shape = hint.get("shape")
    if shape is not None and field.encoding in ("raw", "varlen") and len(shape) == len(field.shape):
        dtype = hint.get("dtype", field.dtype)
        if dtype == "float64" and field.dtype == "float32":
            dtype = "float32"  # Python floats are written as float32, as everywhere
        return dataclasses.replace(field, dtype=dtype, shape=tuple(shape),
                                   encoding="varlen" if None in shape else "raw")
    return field
