"""What an :class:`~datarax.sources.array_record.ArrayRecordSourceModule` state must match
beyond its position and settings: the epoch's order (``shuffled_indices``) and the files
its records are numbered across (``files``).

``files`` digests each file's last path component (so a moved or copied data set still
matches) and record count, in order: a state over other files, or in another order, is
refused; a state without ``files`` is taken as is.

Example:
    >>> a = files_digest(["/data/train-0.array_record", "/data/train-1.array_record"], [5, 7])
    >>> b = files_digest(["s3://bucket/train-0.array_record", "train-1.array_record"], [5, 7])
    >>> a == b, a == files_digest(["/data/train-1.array_record", "/data/train-0.array_record"],
    ...                           [7, 5])
    (True, False)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from datarax.core.errors import StateError

__all__ = ["check_files", "check_shuffled", "file_name", "files_digest"]


def file_name(path: str) -> str:
    """A file's last path component (of a local path or a URL)."""
    return str(path).rstrip("/").rsplit("/", 1)[-1]


def files_digest(files: Sequence[str], counts: Sequence[int]) -> str:
    """A short digest of the files' names and record counts, in record-numbering order."""
    named = [[file_name(f), int(n)] for f, n in zip(files, counts)]
    return hashlib.sha256(json.dumps(named).encode()).hexdigest()[:16]


def check_files(state: dict[str, Any], digest: str, files: Sequence[str], where: str) -> None:
    """Refuse a state whose ``files`` digest is not ``digest`` (absent: accepted)."""
    saved = state.get("files", digest)
    if saved == digest:
        return
    names = [file_name(f) for f in files]
    shown = names if len(names) <= 4 else [*names[:3], f"... ({len(names)} files)"]
    raise StateError(
        f"{where} state was saved over other files (files={saved!r}, a digest of the files' "
        f"names and record counts in order) than this source reads (files={digest!r}: "
        f"{shown}); its position would name other records. Build the source over the "
        "files the state was saved with, in the same order (a glob is sorted; a list is "
        "kept as given).",
        field="files",
    )


def check_shuffled(state: dict[str, Any], expected: dict[str, Any] | None,
                   shuffle_files: bool, where: str) -> None:
    """Refuse a state whose ``shuffled_indices`` describe another order than
    ``expected`` (the source's own description of the saved epoch)."""
    shuffled = state["shuffled_indices"]
    if (shuffled is None) != (expected is None):
        raise StateError(
            f"{where} state was saved with shuffle_files={shuffled is not None} but this "
            f"source has shuffle_files={shuffle_files}; restore it into an "
            "identically configured source.",
            field="shuffle_files",
        )
    if shuffled is None or expected is None:
        return
    if not isinstance(shuffled, dict) or \
            set(shuffled) - {"window", "block"} != {"seed", "epoch", "n"}:
        raise StateError(
            f"{where} state 'shuffled_indices' must be the {{'seed', 'epoch', 'n'}} "
            f"dict get_state() returned, got {shuffled!r}.",
            field="shuffled_indices",
        )
    for key, unit in (("window", ""), ("block", " (bytes)")):
        if shuffled.get(key) != expected.get(key):
            raise StateError(
                f"{where} state was saved with shuffle_{key}={shuffled.get(key)!r} but "
                f"this source has shuffle_{key}={expected.get(key)!r}{unit}; restore it "
                "into an identically configured source.",
                field=f"shuffle_{key}",
            )
    for key, label in (("n", "records"), ("seed", "seed"), ("epoch", "epoch")):
        if shuffled[key] != expected[key]:
            raise StateError(
                f"{where} state was saved with {label}={shuffled[key]!r} "
                f"(shuffled_indices.{key}) but this source has {expected[key]!r}; "
                "it comes from a different dataset or configuration.",
                field="seed" if key == "seed" else f"shuffled_indices.{key}",
            )
