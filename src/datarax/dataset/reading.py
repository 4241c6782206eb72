"""Reading a dataset folder back: its shard files and a batch decoder built from metadata.

:func:`dataset_files` (and :func:`remote_dataset` for URLs) resolves what a reader was
pointed at into shard paths and the metadata; :class:`DatasetDecoder` decodes a list of
records into batch columns.

Example:
    >>> import numpy as np, tempfile, os
    >>> from datarax.dataset.writer import write_dataset
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = write_dataset([{"x": np.float32([i])} for i in range(4)], dst, shards=2)
    >>> files, info = dataset_files(dst, dst)
    >>> [os.path.basename(f) for f in files], info.num_records
    (['data-00000-of-00002.array_record', 'data-00001-of-00002.array_record'], 4)
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from datarax.core.dtypes import fit_value
from datarax.core.owned import fresh_aligned, seal
from datarax.dataset.fields import Features
from datarax.dataset.layout import DATASET_DTYPE_FIX, decode_records
from datarax.dataset.metadata import METADATA_FILE, DatasetInfo, read_metadata
from datarax.errors import ConfigError, RecordError
from datarax.host.counts import count_words
from datarax.storage.local_glob import pattern_files
from datarax.storage.retry import StorageStats
from datarax.storage.urls import (
    RemoteObject,
    join_url,
    list_objects,
    path_list,
    read_json,
    with_versions,
)

__all__ = ["DatasetDecoder", "dataset_files", "remote_dataset"]

# ends the message refusing a remote folder that is not a dataset
_FOLDER_HINT = (" A folder is read whole only when given alone and holding a datarax dataset's "
                f"{METADATA_FILE}.")


def _check_shards(names: list[str], info: DatasetInfo, folder: str,
                  join: Callable[[str, str], str]) -> None:
    """Refuse a name in ``names`` that is not one of the dataset's shards."""
    known = {s.file for s in info.shards}
    stray = [n for n in names if n not in known]
    if stray:
        raise RecordError(
            f"'{stray[0]}' is not a shard of the dataset in '{folder}' (its {METADATA_FILE} "
            f"lists {count_words(len(info.shards), 'shard')}); point the reader at the folder or "
            "its shards only.",
            path=join(folder, stray[0]))


def dataset_files(paths: Any, folder: str) -> tuple[list[str], DatasetInfo]:
    """The shard files ``paths`` names inside dataset ``folder`` (the folder: every shard;
    a glob or list: those shards, in that order), and its metadata.

    Raises:
        RecordError: a shard is missing, or a named file is not one of the shards.
    """
    info = read_metadata(folder)
    if isinstance(paths, (str, os.PathLike)) and os.path.isdir(os.fspath(paths)):
        names = [s.file for s in info.shards]
    else:
        names = []
        for item in path_list(paths, "the dataset's paths"):
            matches = pattern_files(item)
            if not matches:
                raise RecordError(f"the glob pattern '{item}' matches no shard of the dataset in "
                                  f"'{folder}'.", path=item)
            names += [os.path.basename(m) for m in matches]
        _check_shards(names, info, folder, os.path.join)
    files = [os.path.join(folder, n) for n in names]
    for path in files:
        if not os.path.isfile(path):
            raise RecordError(
                f"the dataset in '{folder}' lists the shard '{os.path.basename(path)}', which is "
                "missing; copy the whole folder, or convert the data again.", path=path)
    return files, info


class DatasetDecoder:
    """``list of records -> dict`` of batch columns for a dataset's ``features``.

    64-bit integers are narrowed to 32 bits when they fit, as everywhere in datarax;
    ``float64`` columns are cast to ``float32`` with ``cast_float64`` (else refused while
    ``jax_enable_x64`` is off). A field of variable shape is a ConfigError (a batch needs
    one shape per field).
    """

    #: the fix a 64-bit message names last (read by DecodedRecords too)
    dtype_fix = DATASET_DTYPE_FIX

    def __init__(self, features: Features, *, cast_float64: bool = False) -> None:
        ragged = [f for f in features.fields if None in f.shape]
        if ragged:
            f = ragged[0]
            how = (f"decode=datarax.decode_images('{f.name}', resize=N, crop=C) (or "
                   "random_resized_crop=S), which cuts every image to one size"
                   if f.encoding in ("png", "jpeg") else
                   "your own decode= (datarax.dataset.decode_records gives the per-record "
                   "arrays)")
            raise ConfigError(
                f"the dataset's field '{f.name}' has a variable shape {f.shape}, and a batch "
                "needs one shape per field; read the dataset (its folder, or its shards) "
                f"with {how}, or write the field with a fixed shape.")
        self.features = features
        self.cast_float64 = cast_float64

    def __call__(self, records: Sequence[bytes]) -> dict[str, Any]:
        columns = decode_records(self.features, records, empty=fresh_aligned)
        out: dict[str, Any] = {}
        for name, column in columns.items():
            if column.dtype.kind != "O" and column.dtype.isnative:
                column = seal(column)  # the reader's own batch: to JAX with no other copy
            if column.dtype.kind in "iuf" and column.dtype.itemsize == 8:
                column = fit_value(name, column, cast_float64=self.cast_float64,
                                   drop_hint=self.dtype_fix)
            out[name] = column
        return out

    def decode_one(self, record: bytes) -> dict[str, Any]:
        """One record's fields (the batch decoder on a batch of one)."""
        return {name: column[0] for name, column in self([record]).items()}


def remote_dataset(paths: Any, *, dataset: bool = True,
                   storage_options: Mapping[str, Any] | None = None,
                   stats: StorageStats | None = None, versions: bool = False,
                   where: str = "") -> tuple[list[RemoteObject], DatasetInfo | None]:
    """The remote files ``paths`` (URLs) names, and their dataset's metadata if any
    (``where``, e.g. the source's name, starts the listing's messages).

    With ``dataset``, a URL of a folder holding :data:`METADATA_FILE` (or a glob / list of
    its shards) is a dataset: its files come with the metadata's SHA-256, size and record
    count, unlisted (with ``versions``: tied to the version one listing gives). Otherwise
    the URLs and globs are listed. Retries are counted in ``stats``.

    Example:
        >>> import fsspec, numpy as np, os, tempfile
        >>> from datarax.dataset.writer import write_dataset
        >>> local = os.path.join(tempfile.mkdtemp(), "ds")
        >>> _ = write_dataset([{"x": np.float32([i])} for i in range(4)], local, shards=2)
        >>> fsspec.filesystem("memory").put(local, "/remote-doc/ds", recursive=True)
        >>> objects, info = remote_dataset("memory://remote-doc/ds")
        >>> [(o.name, o.records) for o in objects], info.num_records
        ([('data-00000-of-00002.array_record', 2), ('data-00001-of-00002.array_record', 2)], 4)

    Raises:
        RecordError: a file is missing, or a named file is not a shard of the dataset.
    """
    items = path_list(paths, "the dataset's paths")
    single = len(items) == 1 and not glob.has_magic(items[0])

    def list_all() -> list[RemoteObject]:
        return list_objects(items, storage_options, stats=stats, where=where,
                            folder_hint=_FOLDER_HINT)

    if dataset and items:
        folder = items[0].rstrip("/") if single else items[0].rsplit("/", 1)[0]
        listed = None  # a pattern of folders ("ds/**/*.array_record"): the files' one folder
        if not single and any(glob.has_magic(i.rsplit("/", 1)[0]) for i in items):
            listed = list_all()
            homes = {o.url.rsplit("/", 1)[0] for o in listed}
            if len(homes) != 1:
                return listed, None
            folder = homes.pop()
        data = read_json(join_url(folder, METADATA_FILE), storage_options, stats=stats)
        if data is None and single:  # a file of a dataset?
            folder = folder.rsplit("/", 1)[0]
            data = read_json(join_url(folder, METADATA_FILE), storage_options, stats=stats)
            single = False
        if data is not None and (single or listed is not None
                                 or all(i.rsplit("/", 1)[0] == folder for i in items)):
            info = DatasetInfo.from_json(data, where=join_url(folder, METADATA_FILE))
            if single:
                return _shards_of(folder, info, versions, storage_options, stats), info
            listed = listed or list_all()
            _check_shards([o.name for o in listed], info, folder, join_url)
            return _shards_of(folder, info, versions, storage_options, stats, listed), info
        return listed or list_all(), None
    try:
        return list_all(), None
    except RecordError:
        if not single:
            raise
        folder = items[0].rstrip("/")  # not a file: a dataset folder?
        data = read_json(join_url(folder, METADATA_FILE), storage_options, stats=stats)
        if data is None:
            raise
    info = DatasetInfo.from_json(data, where=join_url(folder, METADATA_FILE))
    return _shards_of(folder, info, versions, storage_options, stats), info


def _shards_of(folder: str, info: DatasetInfo, versions: bool,
               storage_options: Mapping[str, Any] | None, stats: StorageStats | None,
               listed: list[RemoteObject] | None = None) -> list[RemoteObject]:
    """The remote shards of the dataset in ``folder`` (those ``listed``, default: all) as
    its metadata gives them; with ``versions`` each tied to its version in the store now
    (:func:`~datarax.storage.urls.with_versions`)."""
    known = {s.file: s for s in info.shards}
    etags = {o.name: o.etag if versions else None for o in listed or ()}
    shards = [RemoteObject(join_url(folder, n), known[n].bytes, etags.get(n), known[n].sha256,
                           known[n].records) for n in (known if listed is None else etags)]
    return with_versions(shards, storage_options, stats=stats) if versions else shards
