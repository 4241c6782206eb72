"""The document readers of files: JSON Lines (:class:`JsonlDocuments`) and Parquet
(:class:`ParquetDocuments`), readers of :mod:`datarax.text.documents`' protocol.

They take local paths or URLs (any fsspec protocol; globs expanded, sorted); remote files
are fetched into the shard cache and held there until the reader is closed. A document
that is not text becomes a :class:`~datarax.text.documents.BadDocument` naming its place.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datarax.core.dtypes import is_text_scalar
from datarax.core.errors import ConfigError, RecordError
from datarax.core.extras import require
from datarax.sources.remote_files import RemoteFiles
from datarax.storage.local_glob import local_files
from datarax.storage.urls import all_remote, path_list
from datarax.storage import ShardCache
from datarax.text.documents import BadDocument

__all__ = ["JsonlDocuments", "ParquetDocuments", "PathsLike"]

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _paths(
    paths: PathsLike, user: str, cache: ShardCache | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[list[str], RemoteFiles | None]:
    """The files ``paths`` names and, for URLs, those files fetched into the cache and held."""
    out = path_list(paths, f"{user} paths")
    if all_remote(out, f"{user}: paths"):
        files = RemoteFiles.listed(out, where=user, cache=cache, storage_options=storage_options)
        files.local_paths()  # fetched and held now
        return files.urls, files
    return local_files(out, user, mix="mix corpora with MixedDocuments weights"), None


class _FileReader:
    """``paths`` as named (URLs for remote files), the local files read, ``close``, ``storage_stats``."""

    paths: list[str]
    _remote: RemoteFiles | None

    def __repr__(self) -> str:
        paths = getattr(self, "paths", [])
        shown = ", ".join(map(repr, paths[:2])) + (f", ... ({len(paths)} files)"
                                                  if len(paths) > 2 else "")
        name = "column" if hasattr(self, "column") else "field"
        return f"{type(self).__name__}([{shown}], {name}={getattr(self, name, None)!r})"

    def _local(self) -> list[str]:
        """The files to open (cached copies of remote files, held again after :meth:`close`)."""
        return self.paths if self._remote is None else self._remote.local_paths()

    def close(self) -> None:
        """Let the shard cache evict the remote files (a later read holds them again)."""
        if self._remote is not None:
            self._remote.release()

    def storage_stats(self) -> dict[str, Any] | None:
        """For URLs, :meth:`datarax.storage.RemoteShards.stats` since the reader was built; else None."""
        return None if self._remote is None else self._remote.stats()

    def _where(self, index: int, counts: Sequence[int], unit: str, first: int) -> str:
        """``"<path> <unit> <n>"`` of document ``index`` (``counts``: documents per file)."""
        left = index
        for path, count in zip(self.paths, counts):
            if left < count:
                return f"{path} {unit} {left + first}"
            left -= count
        return f"document {index} (past the end of the files)"


class JsonlDocuments(_FileReader):
    """Documents from the ``field`` of each line of JSON Lines files, in file order; a line
    without a string ``field`` is a :class:`BadDocument` naming the file and line.

    Args:
        paths: a file, a glob pattern, a list of them, or URLs / glob patterns of URLs.
        field: the text field of each line's object.
        cache: for URLs, the :class:`~datarax.storage.ShardCache` (default: the default one).
        storage_options: for URLs, options of the fsspec filesystem (credentials ...).

    Raises:
        ConfigError: no path, files and URLs mixed, or a file named twice.
        RecordError: a file is missing or a folder, or a pattern matches nothing.
        CacheFullError: the remote files do not fit the shard cache together.

    Example:
        >>> import json, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl")
        >>> _ = open(path, "w").write("\\n".join(json.dumps({"text": t}) for t in "abc"))
        >>> docs = JsonlDocuments(path)
        >>> list(docs.read(0, 1)), docs.describe(0, 2).endswith("c.jsonl line 3")
        (['b', 'c'], True)
    """

    def __init__(self, paths: PathsLike, field: str = "text", *,
                 cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.paths, self._remote = _paths(paths, "JsonlDocuments", cache, storage_options)
        self.field = field
        self._counts: list[int] | None = None
        self._blanks: list[list[int]] = []

    def _line_counts(self) -> list[int]:
        if self._counts is None:
            counts, blanks = [], []
            for path in self._local():
                last, blank = 0, []
                for last, line in _numbered_lines(path):
                    if not line.strip():
                        blank.append(last)
                counts.append(last - len(blank))  # the lines that are not blank
                blanks.append(blank)
            self._counts, self._blanks = counts, blanks
        return self._counts

    def num_documents(self) -> int:
        return sum(self._line_counts())

    def settings(self) -> dict[str, Any]:
        """The files' names in order (not their folder: data may move), and the field."""
        return {"reader": "JsonlDocuments", "files": _names(self.paths), "field": self.field}

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        lines = (line for path in self._local() for _, line in _numbered_lines(path)
                 if line.strip())  # blank lines are not records; skipped ones are not parsed
        yield from map(self._parse, itertools.islice(lines, start, None))

    def _parse(self, line: bytes) -> Any:
        try:
            record = json.loads(line)
        except UnicodeDecodeError as err:
            return BadDocument(f"is not valid UTF-8 ({err.reason} at byte {err.start})")
        except json.JSONDecodeError as err:
            return BadDocument(f"is not valid JSON ({err.msg} at column {err.colno})")
        if not isinstance(record, dict) or self.field not in record:
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            return BadDocument(f"has no field '{self.field}' (found {keys})")
        value = record[self.field]
        if not isinstance(value, str):
            return BadDocument(f"field '{self.field}' holds {type(value).__name__}, not a string")
        return value

    def describe(self, epoch: int, index: int) -> str:
        """``"<path> line <n>"``: the line's number in its file, blank lines counted."""
        left = index
        for path, count, blanks in zip(self.paths, self._line_counts(), self._blanks):
            if left < count:
                number = left + 1
                for blank in blanks:  # ascending: each blank at or before it pushes it down
                    if blank > number:
                        break
                    number += 1
                return f"{path} line {number}"
            left -= count
        return f"document {index} (past the end of the files)"


def _numbered_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """Each line of a file with its number, as bytes; gzip (by its first bytes) decompressed."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    number = 0
    try:
        with gzip.open(path, "rb") if gzipped else open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                yield number, line
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise RecordError(f"JsonlDocuments: {path} is not a whole gzip file after line {number} "
                          f"({err}); it is truncated or corrupt: fix or replace it.") from err


class ParquetDocuments(_FileReader):
    """Documents from the string (or binary) ``column`` of Parquet files, in file order.

    Arguments and errors as :class:`JsonlDocuments` (``column`` for ``field``); a column
    missing or not text is a ConfigError. Needs ``pyarrow`` (the ``hf`` extra).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "c.parquet")
        >>> pq.write_table(pa.table({"text": ["a", "b", "c"]}), path)
        >>> list(ParquetDocuments(path).read(0, 2)), ParquetDocuments(path).num_documents()
        (['c'], 3)
    """

    def __init__(self, paths: PathsLike, column: str = "text", *,
                 cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self._pq = require("pyarrow.parquet", extra="hf", user="ParquetDocuments")
        self.paths, self._remote = _paths(paths, "ParquetDocuments", cache, storage_options)
        self.column = column
        try:
            self._groups = [self._row_groups(name, path)
                            for name, path in zip(self.paths, self._local())]
        except BaseException:
            self.close()
            raise

    def _row_groups(self, name: str, path: str) -> list[int]:
        """Rows per row group of the file at ``path`` (``name`` in messages)."""
        try:
            meta = self._pq.ParquetFile(path)
        except Exception as err:  # noqa: BLE001 - reported with the file's name
            raise RecordError(
                f"ParquetDocuments: {name} is not a readable Parquet file "
                f"({type(err).__name__}: {err}).", path=name
            ) from err
        names = meta.schema_arrow.names
        if self.column not in names:
            raise ConfigError(
                f"ParquetDocuments: {name} has no column '{self.column}' (columns: {names}); "
                "pass column= naming the text column."
            )
        schema = meta.schema_arrow
        kind = schema.field(self.column).type
        if not _is_text_type(kind) and str(kind) != "null":  # only nulls: each one reported
            texts = [f.name for f in schema if _is_text_type(f.type)]
            raise ConfigError(
                f"ParquetDocuments: {name} column '{self.column}' holds {kind}, not text (its "
                f"text columns: {texts}); pass column= naming the text column."
            )
        return [meta.metadata.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def num_documents(self) -> int:
        return sum(sum(g) for g in self._groups)

    def settings(self) -> dict[str, Any]:
        """The files' names in order, the column and the documents they hold."""
        return {"reader": "ParquetDocuments", "files": _names(self.paths),
                "column": self.column, "documents": self.num_documents()}

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        skip = start
        for path, groups in zip(self._local(), self._groups):
            if skip >= sum(groups):
                skip -= sum(groups)
                continue
            file = self._pq.ParquetFile(path)
            for g, rows in enumerate(groups):
                if skip >= rows:
                    skip -= rows
                    continue
                values = file.read_row_group(g, columns=[self.column]).column(0).to_pylist()
                yield from (_cell(v, self.column) for v in values[skip:])
                skip = 0

    def describe(self, epoch: int, index: int) -> str:
        return self._where(index, [sum(g) for g in self._groups], "row", 0)


_TEXT_TYPES = frozenset({"string", "large_string", "binary", "large_binary", "string_view",
                         "binary_view"})


def _is_text_type(kind: Any) -> bool:
    if str(kind).startswith("dictionary<"):
        kind = kind.value_type  # dictionary-encoded text
    return str(kind) in _TEXT_TYPES


def _cell(value: Any, column: str) -> Any:
    if is_text_scalar(value):
        return value
    return BadDocument(f"column '{column}' holds {type(value).__name__}, not text")


def _names(paths: list[str]) -> list[str]:
    return [os.path.basename(p) for p in paths]
