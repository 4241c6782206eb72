"""The dataset folder: its shard files and the metadata file that describes them.

A dataset is a folder::

    DST/data-00000-of-00004.array_record   # shards (shard_name), written with WRITER_OPTIONS
    DST/...
    DST/datarax_dataset.json               # metadata (METADATA_FILE), written last

The metadata (:class:`DatasetInfo`, :func:`write_metadata` / :func:`read_metadata`) holds
``format`` and ``format_version``, the features, per shard its file name, record count,
size in bytes and SHA-256 (:func:`shard_info`), the rows skipped by a conversion
(``{"row", "field", "error"}``) and free-form ``extra``. A folder without the metadata
file is not a dataset yet.

Example:
    >>> shard_name(0, 4), METADATA_FILE
    ('data-00000-of-00004.array_record', 'datarax_dataset.json')
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from datarax.dataset.fields import Features
from datarax.errors import DataraxError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "PARTIAL_DIR",
    "WRITER_OPTIONS",
    "DatasetInfo",
    "ShardInfo",
    "find_dataset",
    "read_metadata",
    "shard_info",
    "shard_name",
    "write_json",
    "write_metadata",
]

FORMAT_NAME = "datarax.array_record"
FORMAT_VERSION = 1
METADATA_FILE = "datarax_dataset.json"
#: where a conversion keeps its unfinished shards (a folder holding it is not a dataset yet)
PARTIAL_DIR = ".datarax-partial"
#: array_record writer options of every shard (random access: one record per chunk).
WRITER_OPTIONS = "group_size:1"


def shard_name(index: int, count: int, prefix: str = "data") -> str:
    """File name of shard ``index`` of ``count``.

    Example:
        >>> shard_name(3, 16)
        'data-00003-of-00016.array_record'
    """
    return f"{prefix}-{index:05d}-of-{count:05d}.array_record"


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """A finished shard: file name (relative to the dataset folder), records, bytes, SHA-256."""

    file: str
    records: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def shard_info(path: str | os.PathLike[str], records: int) -> ShardInfo:
    """The :class:`ShardInfo` of a finished shard file holding ``records`` records."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return ShardInfo(os.path.basename(os.fspath(path)), int(records), os.path.getsize(path), digest)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What the metadata file holds (see the module docstring); ``shards`` in
    record-numbering order, ``extra`` the conversion's source and options."""

    features: Features
    shards: tuple[ShardInfo, ...]
    skipped: tuple[dict[str, Any], ...] = ()
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_records(self) -> int:
        return sum(s.records for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                "num_records": self.num_records, "features": self.features.to_json(),
                "shards": [s.to_json() for s in self.shards], "skipped": list(self.skipped),
                "extra": dict(self.extra)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "metadata") -> DatasetInfo:
        if not isinstance(data, Mapping):
            raise DataraxError(f"{where}: not a {FORMAT_NAME} dataset (a JSON "
                               f"{type(data).__name__}, not an object).")
        if data.get("format") != FORMAT_NAME:
            raise DataraxError(f"{where}: not a {FORMAT_NAME} dataset (format {data.get('format')!r}).")
        version = data.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise DataraxError(
                f"{where}: format_version {version!r}; this datarax reads up to "
                f"{FORMAT_VERSION} (upgrade datarax).")
        try:
            return cls(Features.from_json(data["features"]),
                       tuple(ShardInfo(**s) for s in data["shards"]),
                       tuple(data.get("skipped", ())), dict(data.get("extra", {})))
        except (KeyError, TypeError, AttributeError) as err:  # a file edited or damaged by hand
            raise DataraxError(
                f"{where}: the metadata is malformed ({type(err).__name__}: {err}); it was "
                "edited or damaged since the conversion wrote it: convert the data again."
            ) from err


def write_json(path: str, data: Any, *, indent: int | None = None) -> None:
    """Write ``data`` to ``path`` as JSON, synced, under a temporary name then renamed (a
    crash never leaves half a file)."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=indent, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def write_metadata(directory: str | os.PathLike[str], info: DatasetInfo) -> str:
    """Write ``info`` as the folder's metadata file."""
    path = os.path.join(os.fspath(directory), METADATA_FILE)
    write_json(path, info.to_json(), indent=1)
    return path


def read_metadata(directory: str | os.PathLike[str], *,
                  storage_options: Mapping[str, Any] | None = None) -> DatasetInfo:
    """The :class:`DatasetInfo` of a dataset folder, local or a URL (``s3://bucket/ds``,
    read with ``storage_options``)."""
    # imported here: a writer's worker process need not import datarax.storage
    from datarax.storage.urls import expand_user, is_remote, join_url, read_json

    directory = expand_user(directory)
    path = (join_url(os.fspath(directory), METADATA_FILE) if is_remote(directory)
            else os.path.join(directory, METADATA_FILE))
    try:
        if is_remote(directory):
            data = read_json(path, storage_options)
            if data is None:
                raise FileNotFoundError(path)
        else:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
    except FileNotFoundError as err:
        raise DataraxError(f"'{directory}' holds no {METADATA_FILE}: not a finished dataset "
                           "(convert it, or resume an interrupted conversion).") from err
    except NotADirectoryError as err:
        raise DataraxError(f"'{directory}' is a file, not a dataset: a dataset is the folder "
                           f"that convert wrote, holding {METADATA_FILE} and its shards.") from err
    except json.JSONDecodeError as err:
        raise DataraxError(f"'{path}' is not valid JSON ({err}).") from err
    return DatasetInfo.from_json(data, where=path)


def find_dataset(paths: Any) -> str | None:
    """The dataset folder ``paths`` names (a folder holding :data:`METADATA_FILE`, or a
    glob / list of files in one), or None for plain files; DataraxError for a folder
    holding an unfinished conversion."""
    from datarax.storage.urls import expand_user  # (see read_metadata)

    paths = expand_user(paths)
    if isinstance(paths, (str, os.PathLike)):
        path = os.fspath(paths)
        if os.path.isdir(path):
            if os.path.isfile(os.path.join(path, METADATA_FILE)):
                return path
            if os.path.isdir(os.path.join(path, PARTIAL_DIR)):
                raise DataraxError(
                    f"'{path}' holds an unfinished conversion (no {METADATA_FILE} yet): finish "
                    "it with the same input and options and resume=True (datarax convert SRC "
                    "DST --resume), then read it.")
            return None
        items = [path]
    elif isinstance(paths, Sequence) and paths and not isinstance(paths, bytes):
        items = [os.fspath(p) for p in paths if isinstance(p, (str, os.PathLike))]
        if len(items) != len(paths):
            return None
    else:
        return None
    from datarax.storage.local_glob import local_glob

    # a pattern by the files it matches ("ds/**/*.array_record" names ds's shards too),
    # one matching nothing by its own folder
    items = [m for p in items for m in (
        (local_glob(p) or [p]) if glob.has_magic(p) and not os.path.exists(p) else [p])]
    folders = {os.path.dirname(os.path.abspath(p)) for p in items}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    return folder if os.path.isfile(os.path.join(folder, METADATA_FILE)) else None
