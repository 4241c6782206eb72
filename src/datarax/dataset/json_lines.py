"""JSON Lines files ``pyarrow`` cannot read as one table, read line by line:
:class:`ParsedJsonLines`, and :func:`bad_json_line`, which names the first line that is
not a JSON object."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ParsedJsonLines", "bad_json_line"]


def _json_text(path: str) -> str:
    with open(path, encoding="utf-8-sig") as f:
        return f.read()


def _parsed(path: str) -> tuple[list[Any], str | None]:
    """A JSON Lines file's values, and the first that is no object, and why."""
    text = _json_text(path)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as err:
            return [], f"the file is not one JSON array ({err})"
        bad = next((n for n, item in enumerate(items) if not isinstance(item, dict)), None)
        return items, None if bad is None else (
            f"item {bad} of its JSON array is a JSON {type(items[bad]).__name__}, not an object")
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            return rows, f"line {number} is not JSON ({err})"
        if not isinstance(row, dict):
            return rows, f"line {number} is a JSON {type(row).__name__}, not an object"
        rows.append(row)
    return rows, None


def bad_json_line(path: str) -> str | None:
    """The first line of a JSON Lines file (or item of a JSON array) that is not a JSON
    object, and why."""
    try:
        return _parsed(path)[1]
    except (OSError, UnicodeDecodeError):
        return None


class ParsedJsonLines:
    """The rows of a JSON Lines file ``pyarrow`` cannot read as one table (a column whose
    type changes), parsed line by line so the writer names each row that does not fit.

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
        """The file's rows: one JSON object a line, or one JSON array of objects (a
        ``.json`` file as many tools write it); None where it is neither."""
        try:
            rows, bad = _parsed(path)
        except (OSError, ValueError):  # not UTF-8
            return None
        return cls(rows) if bad is None else None

    def column(self, name: str) -> Any:
        import pyarrow as pa

        return pa.array([row.get(name) for row in self.rows])

    def uint64_columns(self) -> list[str]:
        """The keys whose integers need ``uint64``: one is beyond ``int64``, none negative."""
        big: set[str] = set()
        negative: set[str] = set()
        for row in self.rows:
            for key, value in row.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    if value >= 2**63:
                        big.add(key)
                    elif value < 0:
                        negative.add(key)
        return sorted(big - negative)

    def slice(self, start: int, length: int) -> ParsedJsonLines:
        return ParsedJsonLines(self.rows[start:start + length])

    def to_pylist(self) -> list[dict[str, Any]]:
        return list(self.rows)
