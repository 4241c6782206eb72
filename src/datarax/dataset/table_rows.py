"""Rows of Parquet, JSON Lines and CSV files: :class:`TableRows` (read a row group or
chunk at a time through ``pyarrow``) and :class:`ParsedJsonLines` (a JSON Lines file
``pyarrow`` cannot read as one table, parsed line by line)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.rows import Rows, files_description, hf_hints, list_hint, list_hint_wanted
from datarax.dataset.write_outcome import ConversionError
from datarax.extras import require

__all__ = ["ParsedJsonLines", "TableRows"]


def _bad_text_as_bytes(table: Any) -> Any:
    """``table`` with each text column that holds bytes that are not UTF-8 (``pyarrow``'s
    JSON reader does not check) as a bytes column, whose bad rows are then named."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            try:
                table.column(i).validate(full=True)
            except pa.ArrowInvalid:
                table = table.set_column(i, field.name, table.column(i).cast(pa.binary()))
    return table


class ParsedJsonLines:
    """The rows of a JSON Lines file ``pyarrow`` cannot read as one table (a column whose
    type changes from row to row), parsed line by line so the writer names each row that
    does not fit; it offers the parts of a table :class:`TableRows` reads.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "mixed.jsonl")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"x": 1}\\n{"x": "one"}\\n\\n{"x": 3}\\n')
        >>> rows = ParsedJsonLines.read(path)
        >>> rows.num_rows, rows.slice(1, 2).to_pylist()
        (3, [{'x': 'one'}, {'x': 3}])
    """

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa

        self.rows = rows
        self.num_rows = len(rows)
        self.schema = pa.schema([])

    @classmethod
    def read(cls, path: str) -> ParsedJsonLines | None:
        """The file's rows, or None where a line is not a JSON object."""
        rows = []
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        if not isinstance(row, dict):
                            return None
                        rows.append(row)
        except (OSError, ValueError):  # not UTF-8, not JSON
            return None
        return cls(rows)

    def column(self, name: str) -> Any:
        import pyarrow as pa

        return pa.array([row.get(name) for row in self.rows])

    def slice(self, start: int, length: int) -> ParsedJsonLines:
        return ParsedJsonLines(self.rows[start:start + length])

    def to_pylist(self) -> list[dict[str, Any]]:
        return list(self.rows)


class TableRows(Rows):
    """Rows of Parquet, JSON Lines or CSV files, read a row group / chunk at a time.

    Parquet is read by row group (only the groups a range needs); JSON Lines and CSV
    files are parsed whole by ``pyarrow`` (once per process).
    """

    def __init__(self, files: Sequence[str], kind: str) -> None:
        self.files = list(files)
        self.kind = kind
        self.description = files_description(kind, self.files)
        self._tables: list[Any] | None = None
        self._hints: dict[str, dict[str, Any]] | None = None
        self._counts = self._count()
        self.length = int(sum(self._counts))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tables": None}

    def _count(self) -> list[int]:
        require("pyarrow", extra="convert", user="datarax convert")
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            counts = []
            for f in self.files:
                try:
                    counts.append(pq.ParquetFile(f).metadata.num_rows)
                except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
                    raise ConversionError(
                        f"cannot read the parquet file '{f}': {err}. Fix or replace the file, or "
                        "leave it out of SRC.") from err
            return counts
        return [t.num_rows for t in self._load()]

    def _load(self) -> list[Any]:
        if self._tables is None:
            import pyarrow.csv
            import pyarrow.json

            read = pyarrow.json.read_json if self.kind == "json" else pyarrow.csv.read_csv
            tables = []
            for f in self.files:
                try:
                    tables.append(_bad_text_as_bytes(read(f)))
                except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
                    parsed = ParsedJsonLines.read(f) if self.kind == "json" else None
                    if parsed is not None:  # a column's type changes: rows checked one by one
                        tables.append(parsed)
                        continue
                    form = ("JSON Lines: one object a line, not a JSON array; "
                            if self.kind == "json" else "")
                    raise ConversionError(
                        f"cannot read the {self.kind} file '{f}': {str(err).rstrip('.')}. Fix the "
                        f"file ({form}every row with the same columns, each of one type), or "
                        "leave it out of SRC.") from err
            self._tables = tables
        return self._tables

    def hints(self) -> dict[str, dict[str, Any]]:
        if self._hints is None:
            self._hints = self._hf_hints() if self.kind == "parquet" else self._text_hints()
            for name, hint in self._list_hints().items():
                self._hints[name] = {**self._hints.get(name, {}), **hint}
        return self._hints

    def _hf_hints(self) -> dict[str, dict[str, Any]]:
        import pyarrow.parquet as pq

        meta = pq.read_schema(self.files[0]).metadata or {}
        raw = meta.get(b"huggingface")
        if not raw:
            return {}
        try:
            features = json.loads(raw)["info"]["features"]
        except (KeyError, ValueError):
            return {}
        return hf_hints(features)

    def _text_hints(self) -> dict[str, dict[str, Any]]:
        """A JSON Lines / CSV column that ``pyarrow`` reads as bytes holds text that is not
        UTF-8: it stays a text field, so its bad rows are named (or skipped)."""
        import pyarrow as pa

        return {field.name: {"encoding": "utf8"} for table in self._load() for field in table.schema
                if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)}

    def _list_hints(self) -> dict[str, dict[str, Any]]:
        """Shape and dtype of each list-of-numbers column, over every row of every file."""
        import pyarrow.parquet as pq

        schema = pq.read_schema(self.files[0]) if self.kind == "parquet" else self._load()[0].schema
        out: dict[str, dict[str, Any]] = {}
        for field in schema:
            if not list_hint_wanted(field.type):
                continue
            if self.kind == "parquet":
                arrays = (batch.column(0) for f in self.files
                          for batch in pq.ParquetFile(f).iter_batches(columns=[field.name]))
            else:
                arrays = (t.column(field.name) for t in self._load())
            try:
                hint = list_hint(field.type, arrays)
            except Exception as err:  # noqa: BLE001 - named with the files
                raise ConversionError(f"{self.description}: cannot read the list column "
                                      f"'{field.name}' ({type(err).__name__}: {err}).") from err
            if hint is not None:
                out[field.name] = hint
        return out

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        offset = 0
        for f, count in enumerate(self._counts):
            lo, hi = max(start, offset), min(stop, offset + count)
            if lo < hi:
                yield from self._file_rows(f, lo - offset, hi - offset)
            offset += count

    def _file_rows(self, f: int, lo: int, hi: int) -> Iterator[Mapping[str, Any]]:
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            reader = pq.ParquetFile(self.files[f])
            offset = 0
            for g in range(reader.num_row_groups):
                n = reader.metadata.row_group(g).num_rows
                a, b = max(lo, offset), min(hi, offset + n)
                if a < b:
                    yield from reader.read_row_group(g).slice(a - offset, b - a).to_pylist()
                offset += n
            return
        table = self._load()[f]
        for a in range(lo, hi, 1000):
            yield from table.slice(a, min(hi, a + 1000) - a).to_pylist()
