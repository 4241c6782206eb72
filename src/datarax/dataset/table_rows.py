"""Rows of Parquet, JSON Lines and CSV files: :class:`TableRows`, read a row group or
chunk at a time through ``pyarrow`` (CSV files as :mod:`datarax.dataset.csv_tables` reads
them; a JSON Lines file ``pyarrow`` cannot read as one table line by line,
:mod:`datarax.dataset.json_lines`); each column's values as the writer stores them
(dates as text, whole numbers beyond ``int64`` as ``uint64``, text that is not UTF-8 named)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.categories import dictionary_labels, parquet_categories
from datarax.dataset.column_records import arrow_numbers
from datarax.dataset.csv_tables import (
    blank_columns_as_text,
    check_header,
    nan_cells_as_nan,
    read_csv,
    short_csv_row,
)
from datarax.dataset.image_header_columns import image_column_sizes
from datarax.dataset.images import ImageSizes, alpha_unused, arrow_images, image_format
from datarax.dataset.json_lines import ParsedJsonLines, bad_json_line
from datarax.dataset.rows import Rows, feature_hints, files_description, list_hints
from datarax.dataset.shared_tables import SharedTables
from datarax.dataset.write_outcome import ConversionError
from datarax.extras import require

__all__ = ["ParsedJsonLines", "TableRows"]

_SENT_TABLE_BYTES = 256 * 2**20  # parsed tables up to this size go to worker processes


def _bad_text_as_bytes(table: Any) -> Any:
    """``table`` with each text column holding non-UTF-8 bytes as bytes."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            try:
                table.column(i).validate(full=True)
            except pa.ArrowInvalid:
                table = table.set_column(i, field.name, table.column(i).cast(pa.binary()))
    return table


def _dates_as_text(table: Any, path: str, kind: str) -> Any:
    """``table`` with each date / time column read back as its text."""
    import pyarrow as pa

    dated = [field.name for field in table.schema if pa.types.is_temporal(field.type)]
    if not dated:
        return table
    if kind == "csv":
        import pyarrow.csv

        again = read_csv(path, convert_options=pyarrow.csv.ConvertOptions(
            include_columns=dated, column_types={name: pa.string() for name in dated}))
    else:
        import pyarrow.json

        again = pyarrow.json.read_json(path, parse_options=pyarrow.json.ParseOptions(
            explicit_schema=pa.schema([(name, pa.string()) for name in dated])))
    for name in dated:
        table = table.set_column(table.schema.get_field_index(name), name, again.column(name))
    return table


def _whole_numbers_beyond_int64(table: Any, path: str, kind: str) -> Any:
    """``table`` with each column of whole numbers that ``pyarrow`` read as floats because
    one is beyond ``int64`` as exact ``uint64`` (rounding every value to a float would lose
    digits); one no 64-bit integer holds is refused by row and column."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if not pa.types.is_floating(field.type):
            continue
        top = _largest_magnitude(table.column(i))
        if top is None or math.isinf(top) or top < 2.0**63:
            continue
        values = _literal_values(path, kind, field.name)
        if values is None or len(values) != table.num_rows:
            continue
        where = f"cannot read the {kind} file '{path}'"
        way = (" Store such numbers as text" + (" (JSON strings)" if kind == "json" else "")
               + ", or leave the column out of SRC.")
        for row, value in enumerate(values):
            if value is not None and not -2**63 <= value < 2**64:
                raise ConversionError(
                    f"{where}, row {row}, column '{field.name}': the integer {value} fits neither "
                    f"int64 nor uint64.{way}")
        negative = next((r for r, v in enumerate(values) if v is not None and v < 0), None)
        if negative is not None:
            big = next(r for r, v in enumerate(values) if v is not None and v >= 2**63)
            raise ConversionError(
                f"{where}, column '{field.name}': row {big} holds {values[big]} (beyond int64) "
                f"and row {negative} holds {values[negative]} (below uint64); no 64-bit integer "
                f"type holds both.{way}")
        table = table.set_column(i, field.name, pa.array(values, pa.uint64()))
    return table


def _largest_magnitude(column: Any) -> float | None:
    """The largest magnitude in a float column, nulls and NaNs left out (None: no value),
    by NumPy on Arrow's buffers (``pyarrow.compute`` would import its kernels or pandas)."""
    import numpy as np

    values = np.abs(arrow_numbers(column))
    values = values[~np.isnan(values)]
    return float(values.max()) if values.size else None


def _literal_values(path: str, kind: str, name: str) -> list[int | None] | None:
    """Column ``name`` as ints (None: missing), or None if one is not whole."""
    import re

    if kind == "json":
        parsed = ParsedJsonLines.read(path)
        if parsed is None:
            return None
        cells: list[Any] = [row.get(name) for row in parsed.rows]
        if all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in cells):
            return cells
        return None
    import pyarrow as pa
    import pyarrow.csv

    column = read_csv(path, convert_options=pyarrow.csv.ConvertOptions(
        include_columns=[name], column_types={name: pa.string()})).column(0).to_pylist()
    nulls = set(pyarrow.csv.ConvertOptions().null_values)
    out: list[int | None] = []
    for text in column:
        if text is None or text.strip() in nulls:
            out.append(None)
        elif re.fullmatch(r"\s*[+-]?\d+\s*", text):
            out.append(int(text))
        else:
            return None
    return out


def _row_group_columns(files: Sequence[str], name: str) -> Iterator[Any]:
    """The column ``name`` of Parquet files, a row group at a time (no copy)."""
    import pyarrow.parquet as pq

    for f in files:
        reader = pq.ParquetFile(f)
        for g in range(reader.num_row_groups):
            yield from reader.read_row_group(g, columns=[name]).column(0).chunks


def _check_column_names(names: Sequence[str], path: str) -> None:
    """Refuse a Parquet file naming a column twice: a record holds one value per name."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise ConversionError(
                f"cannot read the parquet file '{path}': it names the column '{name}' twice "
                f"(columns {seen[name]} and {i}); one would hide the other. Rename one "
                "(pyarrow's table.rename_columns) and write the file again.")
        seen[name] = i


def _parquet_schema(path: str) -> Any:
    """The schema of a Parquet file (``pyarrow.parquet`` imported for Parquet only)."""
    import pyarrow.parquet as pq

    return pq.read_schema(path)


class TableRows(Rows):
    """Rows of Parquet, JSON Lines or CSV files, read a row group / chunk at a time.

    Parquet is read by row group (only the groups a range needs); JSON Lines and CSV
    files are parsed whole by ``pyarrow`` (once per process).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "train.jsonl")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"text": "a", "label": 0}\\n{"text": "b", "label": 1}\\n')
        >>> rows = TableRows([path], "json")
        >>> rows.length, list(rows.iter_rows(1, 2))
        (2, [{'text': 'b', 'label': 1}])
    """

    def __init__(self, files: Sequence[str], kind: str) -> None:
        self.files = list(files)
        self.kind = kind
        self.description = files_description(kind, self.files)
        self._tables: list[Any] | None = None
        self._shared: SharedTables | None = None  # the tables, for worker processes
        #: per image column, the headers of intact plain PNGs the probe read
        self._headers: dict[str, list[tuple[Any, ...]]] = {}
        self._hints: dict[str, dict[str, Any]] | None = None
        self._category_names: dict[str, list[str]] | None = None  # see _categories
        self._counts = self._count()
        self.length = int(sum(self._counts))

    def __getstate__(self) -> dict[str, Any]:
        # a worker gets the JSON Lines / CSV tables parsed here when small enough to copy
        # (:mod:`~datarax.dataset.shared_tables`); else it parses the files itself
        state = {**self.__dict__, "_headers": {}}
        tables = self._tables
        if tables is not None and not (all(hasattr(t, "nbytes") for t in tables)
                                       and sum(t.nbytes for t in tables) <= _SENT_TABLE_BYTES):
            tables = None
        if tables is not None and not any(isinstance(t, ParsedJsonLines) for t in tables):
            if self._shared is None:
                try:
                    self._shared = SharedTables.of(tables)
                except OSError:  # no room for the files: the tables go pickled
                    return {**state, "_tables": tables}
            return {**state, "_tables": None, "_shared": self._shared}
        return {**state, "_tables": tables, "_shared": None}

    def _count(self) -> list[int]:
        require("pyarrow", extra="convert", user="datarax convert")
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            counts = []
            for f in self.files:
                try:
                    reader = pq.ParquetFile(f)
                except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
                    raise ConversionError(
                        f"cannot read the parquet file '{f}': {err}. Fix or replace the file, or "
                        "leave it out of SRC.") from err
                _check_column_names(reader.schema_arrow.names, f)
                counts.append(reader.metadata.num_rows)
            return counts
        return [t.num_rows for t in self._load()]

    def _load(self) -> list[Any]:
        if self._tables is None and self._shared is not None:  # a worker: parsed already
            self._tables = self._shared.tables()
        if self._tables is None:
            import pyarrow.csv
            import pyarrow.json

            read = pyarrow.json.read_json if self.kind == "json" else read_csv
            tables = []
            for f in self.files:
                try:
                    table = read(f)
                except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
                    parsed = ParsedJsonLines.read(f) if self.kind == "json" else None
                    if parsed is not None:  # a column's type changes: rows checked one by one
                        tables.append(parsed)
                        continue
                    form = ("JSON Lines: one object a line, or one JSON array of objects; "
                            if self.kind == "json" else "")
                    short = short_csv_row(f) if self.kind == "csv" else bad_json_line(f)
                    raise ConversionError(
                        f"cannot read the {self.kind} file '{f}': "
                        f"{short or str(err).rstrip('.')}. Fix the file ({form}every row with "
                        "the same columns, each of one type), or leave it out of SRC.") from err
                if self.kind == "csv":
                    check_header(table, f)
                    table = blank_columns_as_text(nan_cells_as_nan(table, f), f)
                table = _whole_numbers_beyond_int64(_dates_as_text(table, f, self.kind), f,
                                                    self.kind)
                tables.append(_bad_text_as_bytes(table))
            self._tables = tables
        return self._tables

    def hints(self) -> dict[str, dict[str, Any]]:
        if self._hints is None:
            self._hints = self._hf_hints() if self.kind == "parquet" else self._text_hints()
            for name, hint in {**self._number_hints(), **self._uint64_hints(),
                               **self._list_hints(), **self._binary_image_hints()}.items():
                self._hints[name] = {**self._hints.get(name, {}), **hint}
        return self._hints

    def _uint64_hints(self) -> dict[str, dict[str, Any]]:
        """A ``uint64`` column stays ``uint64`` (an int would infer ``int64``)."""
        import pyarrow as pa

        schemas = ([_parquet_schema(self.files[0])] if self.kind == "parquet"
                   else [t.schema for t in self._load()])
        names = {field.name for schema in schemas for field in schema
                 if pa.types.is_uint64(field.type)}
        if self.kind == "json":
            names.update(name for t in self._load() if isinstance(t, ParsedJsonLines)
                         for name in t.uint64_columns())
        return {name: {"shape": (), "dtype": "uint64"} for name in sorted(names)}

    def _binary_image_hints(self) -> dict[str, dict[str, Any]]:
        """A Parquet binary column of images follows the alpha rule too."""
        if self.kind != "parquet":
            return {}
        import pyarrow as pa

        out = {}
        for field in _parquet_schema(self.files[0]):
            if field.name in self.schema_hints or not (
                    pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)):
                continue
            values = arrow_images(_row_group_columns(self.files, field.name))
            first = next((v for v in values if v is not None), None)
            if isinstance(first, bytes) and image_format(first) and alpha_unused(
                    itertools.chain([first], values)):
                out[field.name] = {"drop_alpha": True}
        return out

    def _number_hints(self) -> dict[str, dict[str, Any]]:
        """Whole numbers in one file and fractions in another: a float column."""
        if self.kind == "parquet" or len(self.files) < 2:
            return {}
        import pyarrow as pa

        kinds: dict[str, set[str]] = {}
        for table in self._load():
            for field in table.schema:
                kind = ("f" if pa.types.is_floating(field.type) else
                        "i" if pa.types.is_integer(field.type) else "other")
                kinds.setdefault(field.name, set()).add(kind)
        return {name: {"shape": (), "dtype": "float32"}
                for name, found in kinds.items() if found == {"i", "f"}}

    @property
    def schema_hints(self) -> dict[str, dict[str, Any]]:  # type: ignore[override]
        """What a Parquet file's Hugging Face schema says of its columns (``feature_hints``),
        and the class names of its category (dictionary) columns."""
        if self.kind != "parquet":
            return {}
        meta = _parquet_schema(self.files[0]).metadata or {}
        raw = meta.get(b"huggingface")
        try:
            hints = feature_hints(json.loads(raw)["info"]["features"]) if raw else {}
        except (KeyError, ValueError):
            hints = {}
        return {**hints, **{name: {"class_names": names}
                            for name, names in self._categories().items()}}

    def _categories(self) -> dict[str, list[str]]:
        """The categories of the Parquet files' dictionary columns (:mod:`categories`)."""
        if self._category_names is None:
            self._category_names = parquet_categories(self.files[0])
        return self._category_names

    def _hf_hints(self) -> dict[str, dict[str, Any]]:
        hints = self.schema_hints
        for name, hint in hints.items():
            if hint.get("image"):  # the image sizes over every row
                headers = self._headers.setdefault(name, [])
                hints[name] = {**hint, **ImageSizes.of(
                    image_column_sizes(chunk, headers)
                    for chunk in _row_group_columns(self.files, name)).hint()}
                if alpha_unused(arrow_images(_row_group_columns(self.files, name))):
                    hints[name]["drop_alpha"] = True  # as an image folder's (alpha_unused)
        return hints

    def image_headers(self, start: int, stop: int) -> dict[str, tuple[Any, ...]] | None:
        """The headers of rows ``start..stop-1``'s intact plain PNGs the image probe read,
        by image column; None where the probe did not read them all."""
        import numpy as np

        out = {}
        for name, parts in self._headers.items():
            if len(parts) > 1:  # joined once
                parts[:] = [tuple(np.concatenate(a) for a in zip(*parts))]
            if not parts or len(parts[0][0]) < stop:  # (the probe stopped early)
                return None
            out[name] = tuple(a[start:stop] for a in parts[0])
        return out or None

    def _text_hints(self) -> dict[str, dict[str, Any]]:
        """A column of non-UTF-8 text stays text, so its bad rows are named."""
        import pyarrow as pa

        return {field.name: {"encoding": "utf8"} for table in self._load() for field in table.schema
                if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)}

    def _list_hints(self) -> dict[str, dict[str, Any]]:
        """Shape and dtype of each list-of-numbers column, over every row of every file."""
        if self.kind != "parquet":
            return list_hints(self._load()[0].schema,
                              lambda name: (t.column(name) for t in self._load()), self.description)
        return list_hints(_parquet_schema(self.files[0]),
                          lambda name: _row_group_columns(self.files, name), self.description)

    def row_name(self, row: int) -> str:
        """``row 7 (b.csv, row 2)``: with several files, the file and its own row."""
        if len(self.files) == 1:
            return f"row {row}"
        offset = 0
        for path, count in zip(self.files, self._counts, strict=True):
            if row < offset + count:
                return f"row {row} ({path}, row {row - offset})"
            offset += count
        return f"row {row}"

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        for table in self.tables(start, self.length if stop is None else stop):
            yield from table.to_pylist()

    def tables(self, start: int, stop: int) -> Iterator[Any]:
        """Rows ``start..stop-1`` as table slices of up to 1,000 rows (Parquet: within a
        row group), in order (a JSON Lines file read line by line: its own row slices)."""
        offset = 0
        for f, count in enumerate(self._counts):
            lo, hi = max(start, offset), min(stop, offset + count)
            if lo < hi:
                yield from self._file_tables(f, lo - offset, hi - offset)
            offset += count

    def _file_tables(self, f: int, lo: int, hi: int) -> Iterator[Any]:
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            reader = pq.ParquetFile(self.files[f])
            offset = 0
            for g in range(reader.num_row_groups):
                n = reader.metadata.row_group(g).num_rows
                a, b = max(lo, offset), min(hi, offset + n)
                if a < b:
                    group = dictionary_labels(reader.read_row_group(g), self._categories(),
                                              self.description)
                    for c in range(a, b, 1000):
                        yield group.slice(c - offset, min(b, c + 1000) - c)
                offset += n
            return
        table = self._load()[f]
        for a in range(lo, hi, 1000):
            yield table.slice(a, min(hi, a + 1000) - a)
