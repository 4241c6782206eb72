"""CSV files read as ``pyarrow`` tables the way a spreadsheet user means them: the
delimiter a file really uses, long text cells, a header that names every column once,
``nan`` cells as NaN, blank columns as text, and the row whose column count is wrong.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("a;b\\n1;x\\n2;y\\n")
    >>> read_csv(path).to_pylist()
    [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'y'}]
"""

from __future__ import annotations

import math
import os
from typing import Any

from datarax.dataset.write_outcome import ConversionError
from datarax.host.counts import count_words

__all__ = ["NAN_CELLS", "blank_columns_as_text", "check_header", "nan_cells_as_nan", "read_csv",
           "short_csv_row"]


def _delimiter(path: str) -> str:
    """What separates a CSV file's values: a tab in a ``.tsv`` file; else a comma, or a
    tab / semicolon / bar where the header holds one and no comma (a comma-decimal locale)."""
    if path.lower().endswith(".tsv"):
        return "\t"
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            header = f.readline()
    except OSError:
        return ","
    if "," in header:
        return ","
    return next((d for d in ("\t", ";", "|") if d in header), ",")


def read_csv(path: str, **options: Any) -> Any:
    """``pyarrow.csv.read_csv``, in blocks as large as the file where a row is longer
    than ``pyarrow``'s default block (1 MB: a long text cell)."""
    import pyarrow.csv

    delimiter = _delimiter(path)
    if delimiter != ",":
        parse = options.pop("parse_options", None) or pyarrow.csv.ParseOptions()
        parse.delimiter = delimiter
        options["parse_options"] = parse
    try:
        return pyarrow.csv.read_csv(path, **options)
    except ValueError as err:  # pyarrow's ArrowInvalid
        if "straddl" not in str(err):
            raise
    read = options.pop("read_options", None) or pyarrow.csv.ReadOptions()
    read.block_size = max(read.block_size, min(os.path.getsize(path) + 1, 2**31 - 1))
    return pyarrow.csv.read_csv(path, read_options=read, **options)


#: cells ``pyarrow`` reads as a missing value by default that are a float's NaN as
#: Python's ``csv`` module and ``numpy.savetxt`` write it
NAN_CELLS = frozenset({"nan", "NaN", "-nan", "-NaN"})


def check_header(table: Any, path: str) -> None:
    """Refuse a CSV header that would lose a column: a blank or repeated name."""
    seen: dict[str, int] = {}
    for i, name in enumerate(table.schema.names, start=1):
        if not name.strip():
            raise ConversionError(
                f"cannot read the csv file '{path}': column {i} of the header has no name. Name "
                "every column in the first line of the file.")
        if name in seen:
            raise ConversionError(
                f"cannot read the csv file '{path}': the header names the column '{name}' twice "
                f"(columns {seen[name]} and {i}); one would hide the other. Give every column "
                "its own name in the first line of the file.")
        seen[name] = i


def short_csv_row(path: str) -> str | None:
    """Which data row of a CSV file has another number of columns than its header."""
    import pyarrow.csv

    found: list[Any] = []

    def first_bad(row: Any) -> str:
        found.append(row)
        return "error"

    try:
        read_csv(path, read_options=pyarrow.csv.ReadOptions(use_threads=False),
                  parse_options=pyarrow.csv.ParseOptions(invalid_row_handler=first_bad))
    except (OSError, ValueError):
        pass
    if not found or found[0].number is None:
        return None
    row = found[0]
    text = row.text if len(row.text) <= 60 else row.text[:57] + "..."
    columns = count_words(row.actual_columns, "column")
    return (f"row {row.number - 2} ({text!r}) has {columns} where "
            f"the header has {row.expected_columns} (rows count from 0, after the header)")

def nan_cells_as_nan(table: Any, path: str) -> Any:
    """``table`` with the ``nan`` cells of its float columns as NaN, not missing values."""
    import pyarrow as pa
    import pyarrow.csv

    floats = [i for i, field in enumerate(table.schema)
              if pa.types.is_floating(field.type) and table.column(i).null_count]
    if not floats:
        return table
    nulls = [v for v in pyarrow.csv.ConvertOptions().null_values if v not in NAN_CELLS]
    options = pyarrow.csv.ConvertOptions(null_values=nulls)
    again = read_csv(path, convert_options=options)
    for i in floats:
        if pa.types.is_floating(again.schema.field(i).type):
            table = table.set_column(i, table.schema.field(i).name, again.column(i))
    return table


def blank_columns_as_text(table: Any, path: str) -> Any:
    """``table`` with each column holding no value in any row as text, its cells as written;
    one with a ``nan`` cell is a float column."""
    import pyarrow as pa
    import pyarrow.csv

    blank = [field.name for field in table.schema if pa.types.is_null(field.type)]
    if not blank or not table.num_rows:
        return table
    again = read_csv(path, convert_options=pyarrow.csv.ConvertOptions(
        include_columns=blank, column_types={name: pa.string() for name in blank}))
    for name in blank:
        column = again.column(name)
        cells = column.to_pylist()
        if any(cell in NAN_CELLS for cell in cells):  # NaN and missing values: a float column
            column = pa.array([math.nan if cell in NAN_CELLS else None for cell in cells],
                              pa.float64())
        table = table.set_column(table.schema.get_field_index(name), name, column)
    return table
