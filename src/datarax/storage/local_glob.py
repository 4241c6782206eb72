"""Local glob patterns, matched as a URL's are: ``**`` crosses folders, files only.

As fsspec's ``glob`` does for URLs, so ``"data/**/*.array_record"`` names the same files
on a disk as in a bucket.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("a.bin", "sub/b.bin", "sub/deeper/c.bin"):
    ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    ...     open(os.path.join(root, name), "wb").close()
    >>> [os.path.relpath(p, root) for p in local_glob(os.path.join(root, "**", "*.bin"))]
    ['a.bin', 'sub/b.bin', 'sub/deeper/c.bin']
    >>> [os.path.relpath(p, root) for p in local_glob(os.path.join(root, "*"))]
    ['a.bin']
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence

from datarax.errors import RecordError
from datarax.storage.urls import check_named_once

__all__ = ["local_files", "local_glob", "pattern_files"]


def local_glob(pattern: str) -> list[str]:
    """The files (not folders) local ``pattern`` matches, sorted; ``**`` matches any
    number of folders (``glob.glob(pattern, recursive=True)``)."""
    return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))


def pattern_files(path: str) -> list[str]:
    """What ``path`` names: itself when it exists or has no glob characters, else the
    files it matches as a pattern (:func:`local_glob`; ``[]`` when none)."""
    return [path] if os.path.exists(path) or not glob.has_magic(path) else local_glob(path)


def local_files(paths: Sequence[str], where: str, *,
                mix: str = "mix sources with MixSource weights",
                folder_hint: Callable[[str], str] | None = None) -> list[str]:
    """The files local ``paths`` name, in order (a glob pattern: its sorted matches);
    ``where`` starts each message, ``folder_hint(path)`` adds to a folder's, and ``mix``
    says how to read a file more often when one is named twice.

    Raises:
        RecordError: a pattern matches no files, or a path is missing or a folder
            (``.path`` names it).
        ConfigError: a file is named twice (by two entries, or a pattern and a path).

    Example:
        >>> local_files(["/nope/x-*.npy"], "NpySource")
        Traceback (most recent call last):
        ...
        datarax.core.errors.RecordError: NpySource: the glob pattern '/nope/x-*.npy' matches no files. Check the directory and the pattern.
    """
    named: list[tuple[str, list[str]]] = []
    for path in paths:
        files = pattern_files(path)
        if not files:
            raise RecordError(f"{where}: the glob pattern '{path}' matches no files. Check the "
                              "directory and the pattern.", path=path)
        if files == [path] and not os.path.isfile(path):
            if os.path.isdir(path):
                what = (f"the path '{path}' is a directory, not a file. Name its files, or a glob "
                        f"pattern such as '{os.path.join(path, '*')}'."
                        + (folder_hint(path) if folder_hint else ""))
            else:
                what = (f"the file '{path}' does not exist. Check the path (a glob pattern such "
                        f"as 'data-*{os.path.splitext(path)[1].strip()}' is expanded)."
                        + _spaced_hint(path))
            raise RecordError(f"{where}: {what}", path=path)
        named.append((path, files))
    check_named_once(named, where, mix=mix)
    return [file for _, files in named for file in files]


def _spaced_hint(path: str) -> str:
    """" ... '<path>' without them exists" when ``path`` has whitespace around it and the
    path without it exists (a name copied with its spaces or line end); else ``""``."""
    stripped = path.strip()
    if stripped == path or not stripped or not os.path.exists(stripped):
        return ""
    return f" '{stripped}', without the whitespace around it, exists: drop the whitespace."
