"""Replacing a dataset (``overwrite=True``): the new one is written beside it, swapped in
once complete.

The new dataset is written into the sibling folder :func:`beside` (same file system);
once complete, the old files are renamed into :func:`aside`, the new ones in (the
metadata file last), and the old ones removed. A write that fails leaves ``DST`` as it
was; a sibling left by a killed write is removed by the next overwrite. Other files in
``DST`` stay.

Example:
    >>> import os, tempfile
    >>> from datarax.dataset.writer import write_dataset
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = write_dataset([{"x": i} for i in range(4)], dst)
    >>> os.path.basename(beside(dst)), dataset_entries(dst)
    ('.ds.datarax-partial-overwrite', ['datarax_dataset.json', 'data-00000-of-00001.array_record'])
    >>> info, _ = write_dataset([{"x": i} for i in range(6)], dst, overwrite=True)
    >>> info.num_records, os.path.exists(beside(dst))
    (6, False)
"""

from __future__ import annotations

import contextlib
import os
import shutil

from datarax.dataset.metadata import METADATA_FILE, PARTIAL_DIR

__all__ = ["aside", "beside", "dataset_entries", "remove_folder", "swap_in"]


def _sibling(dst: str, kind: str) -> str:
    parent, name = os.path.split(os.path.realpath(dst))  # a link's target's file system
    return os.path.join(parent, f".{name}.datarax-{kind}-overwrite")


def beside(dst: str) -> str:
    """The folder a replacement of the dataset in ``dst`` is written into."""
    return _sibling(dst, "partial")


def aside(dst: str) -> str:
    """The folder the replaced dataset's files wait in while the new ones move in."""
    return _sibling(dst, "old")


def dataset_entries(dst: str) -> list[str]:
    """The names in folder ``dst`` that belong to a dataset (its metadata file first, its
    partial folder, its shards), in that order; other files are not the writer's."""
    names = sorted(os.listdir(dst)) if os.path.isdir(dst) else []
    return ([n for n in names if n == METADATA_FILE] + [n for n in names if n == PARTIAL_DIR]
            + [n for n in names if n.startswith("data-") and n.endswith(".array_record")])


def remove_folder(path: str) -> None:
    """Remove ``path`` (a sibling folder of a replacement) if it is there."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.remove(path)  # a file of that name


def swap_in(new: str, dst: str) -> None:
    """Replace the dataset in ``dst`` by the complete one in ``new``; on an error every file
    is moved back and it is raised."""
    old = aside(dst)
    remove_folder(old)
    os.mkdir(old)
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        for name in dataset_entries(dst):  # the metadata first: DST stops being a dataset
            os.replace(os.path.join(dst, name), os.path.join(old, name))
            moved_out.append(name)
        for name in reversed(dataset_entries(new)):  # the metadata last: DST is one again
            os.replace(os.path.join(new, name), os.path.join(dst, name))
            moved_in.append(name)
    except OSError:
        for name in reversed(moved_in):
            with contextlib.suppress(OSError):
                os.replace(os.path.join(dst, name), os.path.join(new, name))
        for name in reversed(moved_out):
            with contextlib.suppress(OSError):
                os.replace(os.path.join(old, name), os.path.join(dst, name))
        remove_folder(old)
        raise
    remove_folder(old)
    remove_folder(new)
