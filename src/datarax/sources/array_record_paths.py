"""The files an ArrayRecord source reads: one path, a glob pattern or a list of them.

``resolve_paths`` expands patterns (sorted) and checks that every file exists;
``is_folder`` tells one local folder (a datarax dataset) from files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from datarax.dataset.metadata import METADATA_FILE
from datarax.storage.local_glob import local_files
from datarax.storage.urls import path_list

__all__ = ["PathsLike", "is_folder", "resolve_paths"]

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def resolve_paths(paths: PathsLike) -> list[str]:
    """Files named by one path, a glob pattern, or a list of paths / patterns.

    Patterns expand to their sorted matches; every file must exist.

    Raises:
        RecordError: a file is missing or a pattern matches nothing.
        ConfigError: ``paths`` is empty or of the wrong type, or names a file twice
            (a glob pattern and a path it matches too, say).
    """
    return local_files(path_list(paths, "ArrayRecordSourceModule paths"),
                       "ArrayRecordSourceModule",
                       folder_hint=_folder_hint)


def _folder_hint(path: str) -> str:
    """Why a folder in ``paths`` is not read, and what to do."""
    if os.path.isfile(os.path.join(path, METADATA_FILE)):  # a dataset, given in a list
        return (" It is a datarax dataset: give its folder alone (paths='" + path + "'), "
                "not in a list; to read several datasets as one, ConcatSource over a source "
                "of each.")
    return (f" A folder is read whole only when it holds a datarax dataset's {METADATA_FILE}."
            + _image_folder_hint(path))


def _image_folder_hint(path: str) -> str:
    """What to do with ``path`` when it is an image folder (``<class>/<image>``) or a
    folder of its splits (``<split>/<class>/<image>``), read as ArrayRecord by mistake;
    ``""`` otherwise."""
    from datarax.dataset.image_folder import IMAGE_SUFFIXES, is_class_folder, split_folders

    if not os.path.isdir(path):
        return ""
    splits = split_folders(path)
    if splits:
        path = os.path.join(path, splits[0])  # one split at a time
    elif not any(is_class_folder(path, d) and any(
            f.lower().endswith(IMAGE_SUFFIXES) for f in os.listdir(os.path.join(path, d)))
            for d in os.listdir(path)):
        own = sorted(f for f in os.listdir(path)
                     if f.lower().endswith(IMAGE_SUFFIXES) and not f.startswith("."))
        if not own:
            return ""
        parent = os.path.dirname(os.path.abspath(path))  # spelt as ``path`` is: relative or not
        parent = parent if os.path.isabs(path) else os.path.relpath(parent)
        return (f" It holds images ({own[0]}{' ...' if len(own) > 1 else ''}) but no class "
                "folders: convert the image folder it is a class of first (datarax convert "
                f"{parent} DST; images without classes: move "
                f"them into a subfolder, {os.path.join(path, '<name>')}, and convert {path}), "
                "then read DST, with decode=datarax.decode_images(...).")
    return (f" It is an image folder{' of splits' if splits else ''}: convert "
            f"{'each split' if splits else 'it'} first (datarax.dataset.convert('{path}', DST), "
            f"or datarax convert {path} DST), then read DST, with "
            "decode=datarax.decode_images(...) for images of several sizes.")


def is_folder(paths: PathsLike) -> bool:
    """Whether ``paths`` is one local folder (not a file, a glob or a list)."""
    return isinstance(paths, (str, os.PathLike)) and os.path.isdir(os.fspath(paths))

