"""Parsed ``pyarrow`` tables handed to worker processes through a memory-mapped file.

A JSON Lines / CSV file is parsed once, by the main process. :class:`SharedTables` writes
the tables once into Arrow IPC files and pickles as their paths: a worker maps them with
no copy (pickling a table costs both processes copies). On Linux each file is unlinked as
soon as written and opened through ``/proc/<pid>/fd/<fd>``, so a killed process leaves no
file; elsewhere the files are removed when the owner's object is collected.

Example:
    >>> import pickle, pyarrow as pa
    >>> shared = SharedTables.of([pa.table({"x": [1, 2]}), pa.table({"x": [3]})])
    >>> [t.column("x").to_pylist() for t in pickle.loads(pickle.dumps(shared)).tables()]
    [[1, 2], [3]]
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["SharedTables"]


def _remove(paths: Sequence[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def _release(paths: Sequence[str], fds: Sequence[int]) -> None:
    """Close the held ``fds`` and remove the files still named at ``paths``."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    _remove(paths)


def _held(path: str) -> tuple[str, int] | None:
    """On Linux: the file at ``path`` opened, then unlinked; the path other processes
    open it by (``/proc/<pid>/fd/<fd>``) and the descriptor. None elsewhere."""
    fds = f"/proc/{os.getpid()}/fd"
    if not os.path.isdir(fds):
        return None
    fd = os.open(path, os.O_RDONLY)
    os.remove(path)
    return f"{fds}/{fd}", fd


def _write(table: Any) -> str:
    """``table`` in a new temporary Arrow IPC file; its path."""
    import pyarrow as pa

    fd, path = tempfile.mkstemp(prefix="datarax-table-", suffix=".arrow")
    os.close(fd)
    try:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    except BaseException:
        _remove([path])
        raise
    return path


class SharedTables:
    """Tables written once to Arrow IPC files (:meth:`of`), read back mapped in any
    process (:meth:`tables`)."""

    def __init__(self, paths: Sequence[str], owner: bool = False,
                 fds: Sequence[int] = ()) -> None:
        self.paths = list(paths)
        if owner:  # the process that wrote the files removes them (closes those held)
            weakref.finalize(self, _release, [p for p in self.paths if not p.startswith(
                "/proc/")], list(fds))

    @classmethod
    def of(cls, tables: Sequence[Any]) -> SharedTables:
        """``tables``, each written into a new temporary file (OSError where one cannot be)."""
        paths: list[str] = []
        fds: list[int] = []
        try:
            for table in tables:
                path = _write(table)
                paths.append(path)
                held = _held(path)
                if held is not None:
                    paths[-1], fd = held
                    fds.append(fd)
        except BaseException:
            _release([p for p in paths if not p.startswith("/proc/")], fds)
            raise
        return cls(paths, owner=True, fds=fds)

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.paths = state["paths"]

    def tables(self) -> list[Any]:
        """The tables, their buffers mapped from the files (no copy)."""
        import pyarrow as pa

        return [pa.ipc.open_file(pa.memory_map(path)).read_all() for path in self.paths]
