"""Category columns as class labels: a pandas ``Categorical`` (or an Arrow dictionary
column, as pandas writes one to Parquet) is written as a Hugging Face ``ClassLabel`` is:
an integer label field (the category's position) whose ``class_names`` are the categories.

A missing value (``NaN``) stays missing (the writer names its row, or skips it with
``on_error="skip"``).

Example:
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"pet": pd.Categorical(["dog", "cat", "dog"],
    ...                                               categories=["cat", "dog", "bird"])})
    >>> frame_categories(frame)
    {'pet': ['cat', 'dog', 'bird']}
    >>> frame_records(frame, frame_categories(frame))
    [{'pet': 1}, {'pet': 0}, {'pet': 1}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datarax.dataset.write_outcome import ConversionError

__all__ = ["dictionary_labels", "frame_categories", "frame_records", "parquet_categories"]


def frame_categories(frame: Any) -> dict[str, list[str]]:
    """The categories of each ``category`` column of a pandas ``DataFrame``, by column."""
    out = {}
    for name, dtype in frame.dtypes.items():
        if getattr(dtype, "name", None) == "category":
            out[str(name)] = [str(c) for c in dtype.categories]
    return out


def frame_records(frame: Any, categories: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The rows of ``frame`` as records, its category columns as their labels (codes)."""
    if categories:
        frame = frame.assign(**{name: frame[name].cat.codes.astype("int64") for name in categories})
    records = frame.to_dict("records")
    for name in categories:
        for record in records:
            if record[name] < 0:  # pandas' code of a missing value
                record[name] = None
    return records


def parquet_categories(path: str) -> dict[str, list[str]]:
    """The categories of each dictionary column of the Parquet file ``path``, by column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    names = [field.name for field in file.schema_arrow if pa.types.is_dictionary(field.type)]
    if not names:
        return {}
    table = file.read_row_group(0, columns=names) if file.num_row_groups else None
    out = {}
    for name in names:
        chunks = table.column(name).chunks if table is not None else []
        values = chunks[0].dictionary.to_pylist() if chunks else []
        out[name] = [str(v) for v in values]
    return out


def dictionary_labels(table: Any, categories: Mapping[str, Sequence[str]], where: str) -> Any:
    """``table`` with each dictionary column of ``categories`` as ``int64`` labels: the
    position of its value among the categories (missing stays missing).

    Raises:
        ConversionError: a value is not among the categories (``where`` names the data).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, names in categories.items():
        index = table.schema.get_field_index(name)
        if index < 0 or not pa.types.is_dictionary(table.schema.field(index).type):
            continue
        known = pa.array(list(names), pa.string())
        labels = []
        for chunk in table.column(index).chunks:
            values = pc.cast(chunk.dictionary, pa.string())
            if values.equals(known[:len(values)]):  # the same categories, in order
                labels.append(pc.cast(chunk.indices, pa.int64()))
                continue
            positions = pc.index_in(values, value_set=known)
            label = pc.take(positions, chunk.indices)
            lost = pc.and_(pc.is_null(label), pc.is_valid(chunk.indices))
            if pc.any(lost).as_py():
                value = pc.filter(chunk, lost)[0].as_py()
                raise ConversionError(
                    f"{where}: the category column '{name}' holds {value!r}, which is not one "
                    f"of its categories ({', '.join(names)}, from its first file). Give the "
                    "column the same categories in every file (pandas: "
                    "df[col].cat.set_categories([...])) and write them again, or store it as "
                    "text (df[col].astype(str)).")
            labels.append(pc.cast(label, pa.int64()))
        table = table.set_column(index, name, pa.chunked_array(labels, pa.int64()))
    return table
