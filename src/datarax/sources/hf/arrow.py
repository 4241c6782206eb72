"""Arrow columns (and HF ``Image`` features) to the numpy columns a batch carries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax.core.errors import DataraxError
from datarax.core.dtypes import Records, fit_column, record_number
from datarax.sources._columns import as_text
from datarax.sources.hf.config import HFConfig


def _arrow_to_numpy(
    column: Any, name: str, where: str, first_record: Records | None = 0
) -> np.ndarray:
    """One Arrow column as a numpy array (text as an object array of str); errors name
    records by ``first_record`` (:data:`~datarax.core.dtypes.Records`; None inside lists)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if column.null_count:
        first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        at = (" inside a list" if first_record is None
              else f" at record {record_number(first_record, first)}")
        raise DataraxError(
            f"{where}: field '{name}' is missing a value (None){at}; fill missing values "
            "(Dataset.map) or drop the field (exclude_keys)."
        )
    if pa.types.is_dictionary(kind):
        return _arrow_to_numpy(column.dictionary_decode(), name, where, first_record)
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or getattr(pa.types, "is_string_view", lambda t: False)(kind)
    ):
        return as_text(column.to_numpy(zero_copy_only=False))
    n = len(column)
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = column.offsets.to_numpy()
        lengths = np.diff(offsets)
        if n and (lengths != lengths[0]).any():
            bad = int(np.flatnonzero(lengths != lengths[0])[0])
            which = (
                f"record {record_number(first_record, 0)} has {int(lengths[0])}, record "
                f"{record_number(first_record, bad)} has {int(lengths[bad])}"
                if first_record is not None
                else f"inner lists of lengths {int(lengths[0])} and {int(lengths[bad])}"
            )
            raise DataraxError(
                f"{where}: field '{name}' holds lists of different lengths ({which}); "
                "batches need one shape per field. Pad or truncate it first, or drop it "
                "(exclude_keys)."
            )
        width = int(lengths[0]) if n else 0
    elif pa.types.is_struct(kind):
        raise DataraxError(
            f"{where}: field '{name}' is a nested struct ({kind}); datarax batches hold "
            "arrays and text. Flatten it first (Dataset.flatten()) or drop it (exclude_keys)."
        )
    else:
        array = column.to_numpy(zero_copy_only=False)
        if array.dtype.kind not in "biufc":  # decimals (object), dates and times, ...
            raise DataraxError(
                f"{where}: field '{name}' has Arrow type {kind}, which datarax cannot turn "
                "into an array of numbers; convert it first (e.g. dates and times to int64 "
                "counts) or drop it (exclude_keys)."
            )
        return array
    inner = column.flatten()
    if first_record is not None and width and inner.null_count:
        element = int(np.flatnonzero(inner.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataraxError(
            f"{where}: field '{name}' is missing a value (None) inside the list of record "
            f"{record_number(first_record, element // width)}; fill missing values "
            "(Dataset.map) or drop the field (exclude_keys)."
        )
    values = _arrow_to_numpy(inner, name, where, None)
    return values.reshape((n, width) + values.shape[1:])


def table_to_columns(
    table: Any,
    keys: Sequence[str],
    config: HFConfig,
    where: str,
    first_record: Records = 0,
    features: Any = None,
) -> dict[str, np.ndarray]:
    """``table``'s ``keys`` as numpy columns (text as lists' arrays of str), checked and
    fitted to 32 bits; errors name records by ``first_record`` (their stream positions)."""
    columns = {}
    for key in keys:
        feature = features.get(key) if features is not None else None
        if is_image(feature):
            array = _decode_images(table.column(key), feature, key, where, first_record)
        else:
            array = _arrow_to_numpy(table.column(key), key, where, first_record)
        columns[key] = fit_column(
            key, array, where=where, cast_float64=config.cast_float64, first_record=first_record
        )
    return columns


def is_image(feature: Any) -> bool:
    return type(feature).__name__ == "Image" and type(feature).__module__.startswith("datasets")


def _decode_images(
    column: Any, feature: Any, name: str, where: str, first_record: Records
) -> np.ndarray:
    """An HF ``Image`` column (encoded bytes) as one stacked uint8 array."""
    images = []
    for i, value in enumerate(column.to_pylist()):
        if value is None:
            raise DataraxError(
                f"{where}: field '{name}' is missing an image (None) at record "
                f"{record_number(first_record, i)}; fill or filter it first, or drop the "
                "field (exclude_keys)."
            )
        images.append(np.asarray(feature.decode_example(value)))
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        bad = next(i for i, im in enumerate(images) if im.shape != images[0].shape)
        raise DataraxError(
            f"{where}: field '{name}' holds images of different shapes (record "
            f"{record_number(first_record, 0)} is {images[0].shape}, record "
            f"{record_number(first_record, bad)} is {images[bad].shape}); resize them to one "
            "shape first (Dataset.map), convert the dataset (datarax convert) and read it with "
            "decode=datarax.decode_images(...), which cuts each image to one size, or drop "
            "the field (exclude_keys)."
        )
    return np.stack(images)
