"""Document readers: where the text a :class:`PackedTextSource` packs comes from.

A reader is a plain host object with ``read(epoch, start)`` (the documents of pass ``epoch``
from document ``start`` on: ``str``, UTF-8 ``bytes`` or a :class:`BadDocument`),
``describe(epoch, index)`` (where a document comes from, for messages), ``num_documents()``
(per pass), ``close()`` (release held files or streams; safe twice, a later read takes them
again; optional, :func:`close_reader`) and optionally ``settings()`` (a JSON-able dict of what
decides a pass's documents: a saved state restores only into a reader with equal settings,
:func:`reader_settings`). Invariant: every pass yields the same documents in the same order
for the same ``epoch``, so a restore re-reads from a document index.

The file readers take local paths or URLs (any fsspec protocol; a glob is expanded,
sorted). Remote files are listed once, fetched into the shard cache
(:class:`~datarax.storage.ShardCache`) and held there until the reader is closed.
"""

from __future__ import annotations

import gzip
import inspect
import itertools
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from datarax.core.dtypes import is_text_scalar
from datarax.core.errors import ConfigError, RecordError
from datarax.core.extras import require
from datarax.sources.remote_files import RemoteFiles
from datarax.storage.local_glob import local_glob
from datarax.storage.urls import check_named_once
from datarax.storage import ShardCache, expand_user, is_remote


@dataclass(frozen=True)
class BadDocument:
    """An entry a reader could not turn into text; ``reason`` says why."""

    reason: str


class DocumentReader(Protocol):
    """What :class:`PackedTextSource` and :class:`MixedDocuments` read documents from."""

    def read(self, epoch: int, start: int) -> Iterator[Any]: ...

    def describe(self, epoch: int, index: int) -> str: ...

    def num_documents(self) -> int: ...

    def close(self) -> None: ...


class FunctionDocuments:
    """Documents from a function returning a fresh iterable per pass.

    ``fn(epoch)`` (or ``fn()`` when it takes no argument) must give the same documents
    in the same order each time it is called with the same epoch.

    Example:
        >>> docs = FunctionDocuments(lambda epoch: [f"doc {i} of pass {epoch}" for i in range(3)])
        >>> list(docs.read(1, 1)), docs.num_documents()
        (['doc 1 of pass 1', 'doc 2 of pass 1'], 3)
    """

    def __init__(self, fn: Callable[..., Iterable[Any]]) -> None:
        if not callable(fn):
            raise ConfigError(
                f"FunctionDocuments needs a function returning an iterable of documents per "
                f"pass, got {type(fn).__name__}."
            )
        self.fn = fn
        self._takes_epoch = _takes_argument(fn)
        self._count: int | None = None

    def _open(self, epoch: int) -> Iterable[Any]:
        docs = self.fn(epoch) if self._takes_epoch else self.fn()
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
            raise ConfigError(
                f"FunctionDocuments: the function returned {type(docs).__name__}; it must "
                "return an iterable of documents (e.g. a list of str or a generator)."
            )
        return docs

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        return itertools.islice(iter(self._open(epoch)), start, None)

    def describe(self, epoch: int, index: int) -> str:
        return f"document {index} of pass {epoch}"

    def settings(self) -> dict[str, Any]:
        """The function's name (a state restores only under the same function)."""
        name = getattr(self.fn, "__qualname__", type(self.fn).__qualname__)
        return {"reader": "FunctionDocuments", "function": name}

    def num_documents(self) -> int:
        """Documents of pass 0, counted once by reading it through."""
        if self._count is None:
            self._count = sum(1 for _ in self._open(0))
        return self._count

    def close(self) -> None:
        """Nothing to release: the function's iterables are dropped with their pass."""


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    required = [("keyword-only " if p.kind is p.KEYWORD_ONLY else "") + p.name for p in params
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(required) > 1 or any(" " in p for p in required):  # keyword-only: never given
        raise ConfigError(
            f"FunctionDocuments: the function {getattr(fn, '__qualname__', type(fn).__name__)} "
            f"needs {len(required)} argument{'s' * (len(required) > 1)} ({', '.join(required)}"
            "); it is called as fn(epoch) or fn(). Bind the others first (functools.partial) "
            "or give them defaults.")
    return bool(positional)


PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _paths(
    paths: PathsLike, user: str, cache: ShardCache | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[list[str], RemoteFiles | None]:
    """The files ``paths`` names and, for URLs, those files fetched into the cache and held."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = [expand_user(os.fspath(p)) for p in paths]
    if not out:
        raise ConfigError(f"{user} needs at least one file path.")
    remote = [is_remote(p) for p in out]
    if any(remote):
        if not all(remote):
            raise ConfigError(
                f"{user}: paths mixes local paths and URLs ({out}); give one kind."
            )
        files = RemoteFiles.listed(out, where=user, cache=cache, storage_options=storage_options)
        files.local_paths()  # fetched and held now
        return files.urls, files
    named: list[tuple[str, list[str]]] = []
    for path in out:
        if not os.path.isfile(path) and any(c in path for c in "*?["):  # a local glob, sorted
            matched = local_glob(path)
            if not matched:
                raise ConfigError(
                    f"{user}: the glob pattern {path!r} matches no files. Check the folder "
                    "and the pattern."
                )
            named.append((path, matched))
            continue
        if not os.path.isfile(path):
            raise ConfigError(f"{user}: {path!r} is a folder; name its files, or a glob pattern "
                              f"such as {os.path.join(path, '*')!r}." if os.path.isdir(path)
                              else f"{user}: {path!r} does not exist or is not a file.")
        named.append((path, [path]))
    check_named_once(named, user, mix="mix corpora with MixedDocuments weights")
    return [file for _, matched in named for file in matched], None


class _FileReader:
    """``paths`` as named (URLs for remote files), the local files read, ``close``, ``storage_stats``."""

    paths: list[str]
    _remote: RemoteFiles | None

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
    """Documents from the ``field`` of each line of JSON Lines files, in file order.

    A line that is not JSON, is not an object, lacks ``field`` or holds a non-string
    there becomes a :class:`BadDocument` naming the file and line (the source's
    ``on_error`` policy decides what happens to it).

    Args:
        paths: a file, a glob pattern, a list of them, or URLs / glob patterns of URLs.
        field: the text field of each line's object.
        cache: for URLs, the :class:`~datarax.storage.ShardCache` (default: the default one).
        storage_options: for URLs, options of the fsspec filesystem (credentials ...).

    Raises:
        ConfigError: no path, a missing local file, or files and URLs mixed.
        RecordError: a remote file is missing or a pattern matches nothing.
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
    """Each line of a file with its number, as bytes; a gzip file (``.jsonl.gz``, told by
    its first bytes) is read decompressed, and one cut short or corrupt is a RecordError."""
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

    Arguments and errors as :class:`JsonlDocuments` (``column`` for ``field``); a file
    without ``column`` is a ConfigError, one that is not Parquet a RecordError. Restoring
    skips whole row groups by the file metadata. Needs ``pyarrow`` (the ``hf`` extra).

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


def _cell(value: Any, column: str) -> Any:
    if is_text_scalar(value):
        return value
    return BadDocument(f"column '{column}' holds {type(value).__name__}, not text")


class HFStreamDocuments:
    """Documents from the text ``field`` of an :class:`~datarax.sources.HFStreamingSource`.

    ``seek(epoch, 0)`` opens a pass and ``get_batch_with_indices`` reads it; resuming at
    document ``start`` reads past the ones before it. Give the source to this reader only
    (not also to a Pipeline); ``PackedTextSource`` shards the documents per process.

    Example:
        >>> from datarax.sources import HFStreamingSource, HFStreamingConfig
        >>> stream = HFStreamingSource(HFStreamingConfig(data_files="c.jsonl"))  # doctest: +SKIP
        >>> docs = HFStreamDocuments(stream, field="text")  # doctest: +SKIP
    """

    def __init__(self, source: Any, field: str = "text", chunk: int = 1024) -> None:
        spec = source.element_spec()
        if field not in spec:
            raise ConfigError(
                f"HFStreamDocuments: the stream has no field '{field}' (fields: "
                f"{sorted(spec)}); pass field= naming the text field."
            )
        self.source = source
        self.field = field
        self.chunk = int(chunk)
        self._count: int | None = None
        # pass -> {document: its record's index less its own} from each record the stream
        # skipped on: a message names the record of the stream, not the document number
        self._shifts: dict[int, dict[int, int]] = {}

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        self.source.seek(epoch, 0)
        skip, document, last = start, 0, 0
        shifts = self._shifts.setdefault(epoch, {})
        for old in [e for e in self._shifts if e < epoch - 1]:
            del self._shifts[old]
        while True:
            batch, indices = self.source.get_batch_with_indices(self.chunk)
            if batch is None:
                return
            values = batch[self.field]
            moved = np.asarray(indices) - np.arange(document, document + len(values))
            for j in np.flatnonzero(np.diff(moved, prepend=last)):
                shifts[document + int(j)] = int(moved[j])
            document, last = document + len(values), int(moved[-1]) if len(moved) else last
            if skip >= len(values):
                skip -= len(values)
                continue
            yield from list(values)[skip:]
            skip = 0

    def describe(self, epoch: int, index: int) -> str:
        shifts = self._shifts.get(epoch, {})
        at = max((d for d in tuple(shifts) if d <= index), default=None)  # read on a worker
        return (f"record {index + (shifts[at] if at is not None else 0)} of pass {epoch} "
                f"of the stream's field '{self.field}'")

    def settings(self) -> dict[str, Any]:
        """The field, the stream's class and its order settings (``source.shuffle`` ...)."""
        out: dict[str, Any] = {"reader": "HFStreamDocuments", "field": self.field,
                               "source": type(self.source).__name__}
        out.update((f"source.{k}", v) for k, v in self.source.order_settings().items())
        return out

    def num_documents(self) -> int:
        """Records of pass 0, counted once by reading it through."""
        if self._count is None:
            self._count = sum(1 for _ in self.read(0, 0))
        return self._count

    def close(self) -> None:
        """Close the stream source; a later read re-opens it."""
        self.source.close()


def _names(paths: list[str]) -> list[str]:
    return [os.path.basename(p) for p in paths]


def reader_settings(reader: Any) -> dict[str, Any]:
    """What decides the documents of ``reader``'s passes: its ``settings()``, or its class.

    Example:
        >>> reader_settings(FunctionDocuments(lambda: ["a"]))
        {'reader': 'FunctionDocuments', 'function': '<lambda>'}
    """
    own = getattr(reader, "settings", None)
    return dict(own()) if callable(own) else {"reader": type(reader).__name__}


def close_reader(reader: Any) -> None:
    """Call ``reader.close()``; a reader without one holds nothing to release.

    Example:
        >>> close_reader(FunctionDocuments(lambda: ["a"]))  # nothing held: a no-op
    """
    closer = getattr(reader, "close", None)
    if callable(closer):
        closer()


def as_reader(documents: Any) -> Any:
    """``documents`` as a reader: readers pass through, functions are wrapped.

    Example:
        >>> list(as_reader(lambda: ["a", "b"]).read(0, 0))
        ['a', 'b']
    """
    if all(hasattr(documents, m) for m in ("read", "describe", "num_documents")):
        return documents
    if callable(documents):
        return FunctionDocuments(documents)
    raise ConfigError(
        f"documents must be a reader (FunctionDocuments, JsonlDocuments, ParquetDocuments, "
        f"HFStreamDocuments, MixedDocuments) or a function returning an iterable per pass, got "
        f"{type(documents).__name__}. Wrap a list as `lambda epoch: my_list`."
    )
