"""``convert(SRC, DST)``: data on disk into a self-describing ArrayRecord dataset.

:func:`open_rows` recognises ``SRC``:

* ``tfds:NAME[:SPLIT]`` (with ``data_dir``) or a prepared TFDS folder;
* a Hugging Face dataset on disk: a ``save_to_disk`` or ``load_dataset`` cache folder;
* Parquet, JSON Lines and CSV files (a file, a folder of them or a glob;
  :mod:`datarax.dataset.table_rows`; Parquet written by ``datasets`` keeps its image
  columns and class names);
* an image folder, one subfolder per class (labels ``0..k-1`` in sorted folder order;
  :mod:`datarax.dataset.image_folder`);
* ``.npy`` files (one field per file, named after it) or an ``.npz`` (one per array).

Class names (of a schema or an image folder) go to the metadata.

Example:
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "x.npy"), np.arange(12, dtype=np.float32).reshape(6, 2))
    >>> info, summary = convert(os.path.join(d, "x.npy"), os.path.join(d, "out"), shards=2)
    >>> info.num_records, [f.name for f in info.features.fields]
    (6, ['x'])
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.dataset.fields import Features
from datarax.dataset.image_folder import IMAGE_SUFFIXES, ImageFolderRows, is_class_folder
from datarax.dataset.lock import folder_lock
from datarax.dataset.metadata import METADATA_FILE, DatasetInfo
from datarax.dataset.placement import RECORDS_PER_SHARD, automatic_shards
from datarax.dataset.rows import (
    HFRows,
    IterableRows,
    Rows,
    SequenceRows,
    as_rows,
    feature_hints,
    files_description,
)
from datarax.dataset.splits import SPLIT_NAMES, file_split, note_split, pick_split, split_files
from datarax.dataset.table_rows import TableRows
from datarax.dataset.write_workers import WorkerPool
from datarax.dataset.writer import (
    PARTIAL_DIR,
    ConversionError,
    WriteSummary,
    refuse_url_destination,
    write_dataset,
)
from datarax.errors import ConfigError
from datarax.extras import require
from datarax.host.counts import count_words
from datarax.host.dtypes import is_text_dtype
from datarax.storage.local_glob import local_glob
from datarax.storage.urls import expand_user, is_remote

__all__ = ["IMAGE_SUFFIXES", "ImageFolderRows", "NpyRows", "TableRows", "convert", "open_rows"]

TABLE_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv",
                  ".tsv": "csv"}


class NpyRows(Rows):
    """Rows of ``.npy`` files (field = file name) or one ``.npz`` (field = array name)."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = list(files)
        self.description = files_description("numpy", self.files)
        self._arrays: dict[str, np.ndarray] | None = None
        lengths = {k: len(v) for k, v in self._load().items()}
        if len(set(lengths.values())) != 1:
            raise ConversionError(f"{self.description}: the arrays differ in length {lengths}; "
                                  "each row takes one entry of every array.")
        self.length = next(iter(lengths.values()))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            arrays: dict[str, np.ndarray] = {}
            for path in self.files:
                try:
                    if path.endswith(".npz"):
                        with np.load(path) as data:
                            arrays.update({k: data[k] for k in data.files})
                    else:
                        name = os.path.splitext(os.path.basename(path))[0]
                        arrays[name] = np.load(path, mmap_mode="r")
                except (OSError, ValueError, EOFError) as err:
                    raise ConversionError(
                        f"cannot read the numpy file '{path}': {str(err).rstrip('.')}. Save "
                        "numbers, str or bytes arrays (object arrays are not read: loading them "
                        "runs pickle).") from err
            bad = [k for k, v in arrays.items() if v.ndim == 0]
            if bad:
                raise ConversionError(f"{self.description}: '{bad[0]}' is a scalar, not one entry per row.")
            self._arrays = self._split_structured(arrays)
        return self._arrays

    def _split_structured(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A structured array (``np.save`` of records) gives one field per named field."""
        out: dict[str, np.ndarray] = {}
        for name, array in arrays.items():
            if array.dtype.kind == "V" and not array.dtype.names:
                raise ConversionError(
                    f"{self.description}: '{name}' holds raw values of {array.dtype.itemsize} "
                    f"byte(s) ({array.dtype}), most likely an ml_dtypes array (bfloat16 is |V2, "
                    "float8 |V1) that numpy.save wrote as bytes. Save x.astype(np.float32) (exact "
                    "for bfloat16), or x.view(np.uint16) to keep its bits.")
            parts = {n: array[n] for n in array.dtype.names} if array.dtype.names else {name: array}
            for field, part in parts.items():
                if part.dtype.names:
                    raise ConversionError(
                        f"{self.description}: field '{field}' of the structured array '{name}' is "
                        "itself structured; save each of its fields as an array of its own.")
                if field in out or (field != name and field in arrays):
                    raise ConversionError(
                        f"{self.description}: two arrays give the field '{field}' (the fields of "
                        f"the structured array '{name}' are fields of their own); rename one.")
                out[field] = part
        return out

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        # plain ndarray views of the memory maps: a row of a np.memmap costs more
        arrays = {k: np.asarray(v) for k, v in self._load().items()}
        text = {k for k, v in arrays.items() if v.ndim == 1 and is_text_dtype(v.dtype)}
        stop = self.length if stop is None else min(stop, self.length)
        for i in range(start, stop):  # a str / bytes entry as str / bytes, the rest as arrays
            yield {k: (v[i].item() if k in text else np.asarray(v[i])) for k, v in arrays.items()}


def _hf_rows(path: str, split: str | None) -> Rows:
    datasets = require("datasets", extra="hf", user="datarax convert (Hugging Face)")
    if any(os.path.isfile(os.path.join(path, n)) for n in ("dataset_dict.json", "state.json")):
        loaded = datasets.load_from_disk(path)
        if isinstance(loaded, datasets.DatasetDict):
            names = list(loaded)
            chosen = pick_split(names, split, path)
            return note_split(HFRows(loaded[chosen], f"the Hugging Face dataset {path}"),
                              names, split, chosen)
        return HFRows(loaded, f"the Hugging Face dataset {path}")
    arrows = sorted(glob.glob(os.path.join(path, "**", "*.arrow"), recursive=True))
    splits = sorted({_arrow_split(a) for a in arrows} - {None})
    chosen = pick_split(splits, split, path) if splits else None
    files = [a for a in arrows if chosen is None or _arrow_split(a) == chosen]
    parts = [datasets.Dataset.from_file(a) for a in files]
    table = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return note_split(
        HFRows(table, f"the Hugging Face cache {path}" + (f" ({chosen})" if chosen else "")),
        splits, split, chosen)


def _arrow_split(path: str) -> str | None:
    stem = os.path.basename(path)[: -len(".arrow")]
    parts = stem.split("-")
    for i, part in enumerate(parts[1:], 1):
        if part in ("train", "test", "validation", "valid", "dev") or (i == len(parts) - 1 and not part.isdigit()):
            return part
    return None


def _tfds_rows(name_or_dir: str, split: str | None, data_dir: str | None) -> Rows:
    tfds = require("tensorflow_datasets", extra="tfds", user="datarax convert (TFDS)")
    if os.path.isdir(name_or_dir):
        builder = tfds.builder_from_directory(name_or_dir)
    else:
        place = f"data_dir '{data_dir}'" if data_dir else "the default TFDS data_dir"
        try:
            builder = tfds.builder(name_or_dir, data_dir=data_dir)
        except tfds.core.registered.DatasetNotFoundError:  # not its whole catalog
            raise ConversionError(
                f"TFDS has no dataset named '{name_or_dir}' (not in its catalog or in {place}). "
                "Check the spelling (see tfds.list_builders()), or point --data-dir "
                "(data_dir=) at the folder holding the prepared dataset.") from None
        if not builder.is_prepared():
            raise ConversionError(
                f"the TFDS dataset '{name_or_dir}' is not prepared in {place}; convert reads "
                "prepared data only (it never downloads). Point --data-dir (data_dir=) at the "
                f"folder holding it, or prepare it first (tfds.builder('{name_or_dir}')"
                ".download_and_prepare()).")
    asked, names = split, list(builder.info.splits)
    split = pick_split(names, split, name_or_dir)
    description = f"the TFDS dataset {builder.info.full_name} ({split})"
    try:
        rows: Rows = SequenceRows(builder.as_data_source(split=split), description)
    except Exception:  # noqa: BLE001 - TFRecord-format data: read it once, in order
        rows = IterableRows(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)),
                            length=builder.info.splits[split].num_examples,
                            description=description)
    rows.schema_hints = feature_hints(builder.info.features)
    return note_split(rows, names, asked, split)


def _files_of(src: str, suffixes: Sequence[str],
              listing: Mapping[str, list[str]] | None = None) -> list[str]:
    """The files of ``src`` (a folder, a file or a glob) ending in ``suffixes``."""
    if os.path.isdir(src):
        listing = _folder_files(src) if listing is None else listing
        return sorted(os.path.join(dirpath, f) for dirpath, files in listing.items()
                      for f in files if f.lower().endswith(tuple(suffixes)))
    found = local_glob(src) if glob.has_magic(src) else [src] if os.path.isfile(src) else []
    return [f for f in found if f.lower().endswith(tuple(suffixes))]


def _folder_files(src: str) -> dict[str, list[str]]:
    """The file names in each folder under ``src``, hidden ones and datasets left out."""
    found = {}
    for dirpath, dirnames, files in os.walk(src):
        if METADATA_FILE in files or os.path.basename(dirpath) == PARTIAL_DIR:
            dirnames.clear()  # a datarax dataset (e.g. DST inside SRC): not input
            continue
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__MACOSX"]
        found[dirpath] = [f for f in files if not f.startswith(".")]
    return found


def _refuse_images_beside(src: str, listing: Mapping[str, list[str]], other: list[str]) -> None:
    """Refuse a folder ``src`` holding both images and ``other`` files convert reads (a
    stray ``info.json`` would make it a table, its images left out in silence)."""
    if not other:
        return
    images = _files_of(src, IMAGE_SUFFIXES, listing)
    if not images:
        return
    shown = ", ".join(os.path.relpath(f, src) for f in other[:3]) + (
        f" and {len(other) - 3} more" if len(other) > 3 else "")
    metadata = any(os.path.basename(f).startswith("metadata.") for f in other)
    raise ConversionError(
        f"'{src}' holds {count_words(len(images), 'image')} (such as {os.path.relpath(images[0], src)}) and "
        f"also {shown}, which convert reads as data themselves; convert one kind: move those "
        "files out to convert the images (an image folder: SRC/<class>/<image>), or give them "
        f"as SRC (datarax convert {_as_src(other)} DST) to convert them." + (
            " For a Hugging Face imagefolder with metadata: load it with datasets.load_dataset("
            f"'imagefolder', data_dir='{src}'), save_to_disk(FOLDER), and convert FOLDER."
            if metadata else ""))


def _as_src(files: list[str]) -> str:
    """The SRC that names ``files``: the file, or a quoted glob of its folder and suffix."""
    if len(files) == 1:
        return files[0]
    suffix = os.path.splitext(files[0])[1]
    return f"'{os.path.join(os.path.dirname(files[0]), '*' + suffix)}'"


def open_rows(src: str, *, split: str | None = None, data_dir: str | None = None) -> Rows:
    """The :class:`~datarax.dataset.rows.Rows` of ``src`` (see the module docstring), or a
    ConversionError when it does not exist or is none of the known kinds."""
    src = expand_user(src)  # '~/data' is the home folder's
    if os.path.isfile(os.path.join(src, METADATA_FILE)):
        raise ConversionError(
            f"'{src}' is a datarax dataset already; read it with "
            f"ArrayRecordSourceModule(ArrayRecordSourceConfig(), '{src}') (to write it again with "
            "other shards, pass that source to datarax.dataset.write_dataset).")
    if data_dir is not None and not src.startswith("tfds:"):
        raise ConfigError(
            f"data_dir (--data-dir) '{data_dir}' names the TFDS data directory of a tfds:NAME "
            f"source; '{src}' is read as it is. Leave data_dir out, or convert tfds:NAME.")
    if is_remote(src):
        raise ConversionError(
            f"convert reads local files, and '{src}' is a URL. Copy the files to a local folder "
            "first (e.g. `aws s3 cp --recursive`, `gcloud storage cp -r`), then convert that.")
    if src.startswith("tfds:"):
        name, _, spl = src[5:].partition(":")
        return _tfds_rows(name, split or spl or None, data_dir)
    listing = None
    if os.path.isdir(src):
        names = set(os.listdir(src))
        if {"features.json", "dataset_info.json"} <= names:
            return _tfds_rows(src, split, data_dir)
        listing = _folder_files(src)
        if names & {"state.json", "dataset_dict.json"} or _files_of(src, (".arrow",), listing):
            return _hf_rows(src, split)
    tables = _files_of(src, tuple(TABLE_SUFFIXES), listing)
    if listing is not None:  # a folder: images in class folders beside them?
        _refuse_images_beside(src, listing, tables + _files_of(src, (".npy", ".npz"), listing))
    kinds = {TABLE_SUFFIXES[os.path.splitext(f)[1].lower()] for f in tables}
    if len(kinds) > 1:
        raise ConversionError(f"'{src}' mixes {sorted(kinds)} files; convert one kind at a time.")
    if tables:
        files = split_files(src, tables, split)
        splits = sorted({s for f in tables if (s := file_split(f, SPLIT_NAMES))})
        chosen = file_split(files[0], SPLIT_NAMES) if len(splits) > 1 else None
        return note_split(TableRows(files, kinds.pop()), splits, split, chosen)
    arrays = _files_of(src, (".npy", ".npz"), listing)
    image_folder = not arrays and os.path.isdir(src) and any(
        is_class_folder(src, d) for d in os.listdir(src))
    if split is not None and (arrays or image_folder):  # read as they are: no split to pick
        kind = "is an image folder" if image_folder else "holds numpy files"
        inside = (f"; to convert the images in '{os.path.join(src, split)}', give that folder "
                  "as SRC" if os.path.isdir(os.path.join(src, split)) else "; leave split out")
        raise ConfigError(f"split= (--split) '{split}' picks a split of a Hugging Face / TFDS "
                          f"dataset or of table files; '{src}' {kind}, read whole{inside}.")
    if arrays:
        return NpyRows(arrays)
    if image_folder:
        return ImageFolderRows(src)
    raise ConversionError(_unknown_input(src))


_KNOWN_INPUTS = ("Parquet / JSON Lines / CSV files (.parquet, .jsonl / .json, .csv / .tsv), a "
                 "Hugging Face dataset folder, a TFDS folder or tfds:NAME, an image folder "
                 "(<class>/<image>), .npy / .npz")


def _unknown_input(src: str) -> str:
    """Why ``src`` is none of the inputs convert reads."""
    if os.path.isfile(src):
        suffix = os.path.splitext(src)[1] or "suffix-less"
        return (f"'{src}' is a {suffix} file, which convert does not read; it reads "
                f"{_KNOWN_INPUTS}, known by their suffix. Save the data as one of them.")
    if os.path.isdir(src):
        entries = sorted(e for e in os.listdir(src) if not e.startswith("."))
        if not entries:
            return (f"the folder '{src}' is empty; SRC is the folder or files that hold the data: "
                    f"{_KNOWN_INPUTS}.")
        more = f" (+{len(entries) - 5} more)" if len(entries) > 5 else ""
        shown = ", ".join(entries[:5]) + more
        images = any(e.lower().endswith(IMAGE_SUFFIXES) for e in entries)
        parent = os.path.dirname(os.path.abspath(src))
        return (f"the folder '{src}' holds nothing convert reads (it holds {shown}); it reads "
                f"{_KNOWN_INPUTS}." + (
                    f" For its images: an image folder is ROOT/<class>/<image>; if it is one "
                    f"class of one, convert the folder it is in ({parent}); for images without "
                    f"classes, move them into one subfolder ({src}/<name>/) and convert '{src}'."
                    if images else ""))
    if src.startswith("hf:"):
        name = src[3:].split(":")[0]
        return (f"convert reads a Hugging Face dataset from disk, not '{src}' (a Hub name): save "
                f"it first, e.g. datasets.load_dataset('{name}', split='train')"
                f".save_to_disk('{name.replace('/', '_')}_train'), and convert that folder.")
    if glob.has_magic(src):
        matched = sorted(glob.glob(src, recursive=True))
        none = "which is none of" if len(matched) == 1 else "none of them"
        what = (f"matches {count_words(len(matched), 'path')} ({', '.join(matched[:3])}"
                f"{', ...' if len(matched) > 3 else ''}), {none}" if matched
                else "matches no file; convert reads")
        return f"the pattern '{src}' {what} {_KNOWN_INPUTS}. Check the pattern."
    return (f"'{src}' does not exist. Check the path; SRC is one of {_KNOWN_INPUTS}, or a glob "
            "pattern of files (quoted in the shell).")


def _check_dst_outside(src: str, dst: str, rows: Rows) -> None:
    """Refuse a ``dst`` that is the ``src`` folder itself, or inside a class folder of an
    image folder (the class would stop being one once it holds the dataset)."""
    if not os.path.isdir(src):
        return
    root, target = os.path.realpath(src), os.path.realpath(dst)
    if target == root:
        raise ConversionError(
            f"'{dst}' is the input folder itself; write the dataset into another folder "
            "(a new subfolder of it is fine).")
    if isinstance(rows, ImageFolderRows):
        for name in rows.folders:
            folder = os.path.join(root, name)
            if target == folder or target.startswith(folder + os.sep):
                raise ConversionError(
                    f"'{dst}' is inside the class folder '{name}' of the image folder '{src}'; "
                    "write the dataset outside the class folders (next to them, or elsewhere).")


def convert(
    src: str | Any,
    dst: str | os.PathLike[str],
    *,
    shards: int | None = None,
    workers: int = 1,
    on_error: str = "raise",
    resume: bool = False,
    overwrite: bool = False,
    split: str | None = None,
    data_dir: str | None = None,
    features: Features | None = None,
    progress: bool = False,
    runner: str = "local",
    beam_options: Sequence[str] = (),
    resize: int | tuple[int, int] | None = None,
    class_names: Mapping[str, Sequence[str]] | None = None,
) -> tuple[DatasetInfo, WriteSummary]:
    """Convert ``src`` (a path / ``tfds:NAME``, or any records) into a dataset in ``dst``.

    The Python face of ``datarax convert``; ``shards`` (default: one per 50,000 records)
    and the other options as in :func:`~datarax.dataset.writer.write_dataset`.
    ``runner="beam"`` runs it on Apache Beam (:mod:`datarax.beam`) with ``beam_options``.
    ``resize`` resizes every encoded image as it is written: an int its shorter side, a
    ``(height, width)`` to exactly that (:mod:`datarax.dataset.resized_rows`).
    ``class_names`` names the classes of label fields; an image folder's class folders
    are then labelled by their position in ``class_names["label"]`` (a validation split
    missing a class keeps the train split's labels).

    A second conversion into ``dst`` while one runs is refused (:mod:`datarax.dataset.lock`).
    """
    if runner not in ("local", "beam"):
        raise ConfigError(f"convert runner must be 'local' or 'beam', got {runner!r}.")
    if runner == "local":
        refuse_url_destination(dst, "convert with runner='local'")
    path = isinstance(src, (str, os.PathLike))
    with contextlib.ExitStack() as stack:
        pool = None
        if runner == "local" and path and isinstance(workers, int) and workers > 1 and (
                shards is None or (isinstance(shards, int) and shards > 1)):
            # the workers start (an interpreter, imports) while the input is opened here
            pool = stack.enter_context(WorkerPool(
                workers if shards is None else min(workers, shards),
                preload=_worker_modules(os.fspath(src))))
        src, dst = expand_user(src) if path else src, expand_user(dst)
        rows = open_rows(src, split=split, data_dir=data_dir) if path else as_rows(src)
        if path:
            _check_dst_outside(os.fspath(src), os.fspath(dst), rows)
        rows, extra = _resized_and_noted(rows, os.fspath(src) if path else None, resize)
        count = shards if shards is not None else automatic_shards(rows.length or 0,
                                                                   RECORDS_PER_SHARD)
        with folder_lock(dst, error=ConversionError, what="this conversion"):  # one writer
            if runner == "local":
                return write_dataset(rows, dst, features=features, shards=count,
                                     workers=workers, on_error=on_error, resume=resume,
                                     overwrite=overwrite, progress=progress, extra=extra,
                                     pool=pool, class_names=class_names)
            try:
                import datarax.dataset.beam as beam  # noqa: PLC0415 - needs the beam extra
            except ImportError as err:
                raise ConversionError(
                    f"convert runner='beam' needs datarax.beam and Apache Beam ({err}); install "
                    "'datarax[beam]', or use runner='local'.") from err
            return beam.convert_rows(rows, os.fspath(dst), features=features, shards=count,
                                     on_error=on_error, resume=resume, overwrite=overwrite,
                                     class_names=class_names, extra=extra,
                                     beam_options=list(beam_options))


def _worker_modules(src: str) -> tuple[str, ...]:
    """The modules a worker process's write of ``src`` imports (``pyarrow`` for tables)."""
    modules: tuple[str, ...] = ("datarax.dataset.writer", "array_record.python.array_record_module")
    try:
        names = os.listdir(src) if os.path.isdir(src) else [src]
    except OSError:
        return modules
    kinds = {TABLE_SUFFIXES.get(os.path.splitext(n)[1].lower()) for n in names} - {None}
    if kinds:
        modules += ("datarax.dataset.table_rows", "pyarrow") + (
            ("pyarrow.parquet",) if "parquet" in kinds else ())
    return modules


def _resized_and_noted(rows: Rows, src: str | None,
                       resize: int | tuple[int, int] | None) -> tuple[Rows, dict[str, Any]]:
    """``rows`` with every image resized as it is written (``resize``), and the metadata's
    ``extra`` about them (source, resize, split, classes without images, files left out)."""
    choice = getattr(rows, "split_choice", None)  # SRC's other splits, left out
    empty = getattr(rows, "empty_classes", None)  # an image folder's classes without images
    left_out = getattr(rows, "left_out", None)  # an image folder's files that are no images
    resized = None
    if resize is not None:
        from datarax.dataset.resized_rows import ResizedRows

        rows = resized = ResizedRows(rows, resize)
        resized.check_images()  # else the metadata would say 'resize' of nothing resized
    extra: dict[str, Any] = {"source": src if src is not None else rows.description}
    if resized is not None:
        extra["resize"] = resized.resize
    if choice is not None:
        extra["split"], extra["other_splits"] = choice[0], list(choice[1])
    if empty:
        extra["empty_classes"] = list(empty)
    if left_out:
        extra["files_left_out"] = dict(sorted(left_out.items()))
    return rows, extra
