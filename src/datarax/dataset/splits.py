"""Splits of an input: which split a table file belongs to (``train-00000.parquet``,
``test.csv``, a file in ``validation/``), the files of the split asked for (``train`` when
none is asked and the files hold several), and the note of the splits left out.

Example:
    >>> file_split("data/train-00000.parquet", SPLIT_NAMES), file_split("a.csv", SPLIT_NAMES)
    ('train', None)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from datarax.dataset.rows import Rows
from datarax.dataset.write_outcome import ConversionError

__all__ = ["SPLIT_NAMES", "file_split", "note_split", "pick_split", "split_files"]

#: split names recognised in table file names (``train-00000-of-00002.parquet``) and folders
SPLIT_NAMES = ("train", "test", "validation", "valid", "dev", "eval")


def note_split(rows: Rows, splits: Sequence[str], asked: str | None, chosen: str | None) -> Rows:
    """``rows``, noting the split taken when none was asked for and SRC holds others."""
    if asked is None and chosen is not None and len(splits) > 1:
        others = sorted(s for s in splits if s != chosen)
        rows.split_choice = (chosen, others)  # type: ignore[attr-defined]
    return rows


def pick_split(splits: list[str], split: str | None, where: str) -> str:
    """The split asked for among ``splits`` (of the input ``where``); none asked: ``train``,
    or the only one."""
    if split is not None:
        if split not in splits:
            raise ConversionError(f"'{where}' has no split '{split}'; it has {splits}.")
        return split
    if "train" in splits:
        return "train"
    if len(splits) == 1:
        return splits[0]
    raise ConversionError(f"'{where}' holds the splits {splits}; pick one with split= (--split).")


def file_split(path: str, names: Sequence[str]) -> str | None:
    """The split a table file belongs to: ``<split>-*.ext`` / ``<split>.ext``, or a file in a
    ``<split>/`` folder, for a split in ``names``."""
    stem = os.path.basename(path).split(".")[0].split("-")[0]
    if stem in names:
        return stem
    parent = os.path.basename(os.path.dirname(path))
    return parent if parent in names else None


def split_files(src: str, tables: list[str], split: str | None) -> list[str]:
    """The files of ``split``; with none asked for and files of several splits, ``train``'s."""
    if split is not None:
        chosen = [f for f in tables if file_split(f, (split,)) == split]
        if not chosen:
            found = sorted({s for f in tables if (s := file_split(f, SPLIT_NAMES))})
            raise ConversionError(
                f"'{src}' has no files of the split '{split}' (files named '{split}-*' or "
                f"'{split}.*', or in a '{split}' folder); "
                + (f"the splits found: {found}, pick one of those." if found else
                   "no file names a split: leave out split= (--split)."))
        return chosen
    splits = {f: file_split(f, SPLIT_NAMES) for f in tables}
    found = sorted({s for s in splits.values() if s})
    if len(found) > 1:
        loose = [os.path.relpath(f, src) if os.path.isdir(src) else f
                 for f in tables if splits[f] is None]
        if loose:  # which split they hold is unknown: not left out in silence
            more = f" (+{len(loose) - 3} more)" if len(loose) > 3 else ""
            raise ConversionError(
                f"'{src}' holds files of the splits {', '.join(found)} and files of none "
                f"({', '.join(loose[:3])}{more}); pick a split with split= (--split NAME; the "
                "files of no split are then left out), or rename those files "
                "(<split>-*.ext, <split>.ext, or in a <split>/ folder).")
        chosen_split = pick_split(found, None, src)
        return [f for f in tables if splits[f] == chosen_split]
    return tables
