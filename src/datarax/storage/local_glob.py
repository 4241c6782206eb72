"""Local glob patterns, matched as a URL's are: ``**`` crosses folders, files only.

fsspec's ``glob`` (remote paths) lets ``**`` match any number of folders, zero
included, and leaves folders out of what it lists; :func:`local_glob` does the same for
a local pattern, so ``"data/**/*.array_record"`` names the same files on a disk as in a
bucket. Every datarax reader that expands a local pattern asks it.

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

__all__ = ["local_glob"]


def local_glob(pattern: str) -> list[str]:
    """The files (not folders) local ``pattern`` matches, sorted; ``**`` matches any
    number of folders (``glob.glob(pattern, recursive=True)``)."""
    return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
