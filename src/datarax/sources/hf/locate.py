"""Finding and opening a Hugging Face dataset: Hub id, local folder, saved dataset or files.

Also the split arithmetic (HF slice syntax) and what the dataset declares about a
split's size."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any

from datarax.core.errors import ConfigError, DataraxError
from datarax.core.extras import require
from datarax.sources.hf.config import HFConfig
from datarax.storage.local_glob import local_glob, pattern_files
from datarax.storage.urls import check_named_once, is_remote


_BUILDER_BY_SUFFIX = {
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".arrow": "arrow",
    ".txt": "text",
}


def datasets_module(user: str) -> Any:
    return require("datasets", extra="hf", user=user)


def _is_saved_to_disk(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, f))
        for f in ("dataset_dict.json", "state.json")
    )


_PARQUET_BATCH = 10_000  # rows per batch datasets reads where a Parquet file holds none


def builder_for(path: str) -> str | None:
    """The ``datasets`` builder of a data file, from its extension (None: unknown)."""
    for suffix, builder in _BUILDER_BY_SUFFIX.items():
        if path.endswith(suffix) or path.endswith(suffix + ".gz"):
            return builder
    return None


def split_names(split: str) -> list[str]:
    return [part.split("[")[0].strip() for part in split.split("+")]


def _not_found(where: str, config: HFConfig) -> DataraxError:
    what = repr(config.name) if config.name is not None else f"data_files={config.data_files!r}"
    return DataraxError(
        f"{where}: dataset {what} was not found: it is not a local folder or data file, "
        "and the Hugging Face Hub does not have it or cannot be reached (offline). Pass "
        "a Hub id, a local dataset folder (e.g. one written by save_to_disk) or data files."
    )


def open_splits(config: HFConfig, *, streaming: bool, where: str,
                cache_dir: str | None = None,
                lengths: dict[str, int] | None = None) -> dict[str, Any]:
    """All splits of the dataset ``config`` names (lazy for streams), keyed by name;
    ``cache_dir``: where ``datasets`` prepares them (default its own cache); ``lengths``,
    when given, receives the record count of each split known without reading it (a
    folder written by ``save_to_disk``, whose streams do not declare their size)."""
    datasets = datasets_module(where)
    name = config.name
    base = split_names(config.split)[0]
    kwargs: dict[str, Any] = {"streaming": streaming}
    if cache_dir is not None:
        kwargs["cache_dir"] = cache_dir
    if config.data_dir is not None:
        kwargs["data_dir"] = config.data_dir
    if name is not None and _is_saved_to_disk(name):
        _check_saved_alone(config, where)
        loaded = datasets.load_from_disk(name)
        if isinstance(loaded, datasets.Dataset):
            loaded = {str(loaded.split or "train"): loaded}
        splits = dict(loaded)
        if lengths is not None:
            lengths.update((k, len(v)) for k, v in splits.items())
        if streaming:
            splits = {k: v.to_iterable_dataset(num_shards=_shards_for(len(v))) for k, v in splits.items()}
        return splits
    # a local folder by its absolute path: datasets names the dataset after the folder,
    # and "." or "./" would give it no name (ValueError: dataset_name should be specified)
    path = os.path.abspath(name) if name is not None and os.path.isdir(name) else name
    files = config.data_files
    if files is None and name is not None and (
        os.path.isfile(name) or (glob.has_magic(name) and local_glob(name))
    ):
        path, files = builder_for(name), name
        if path is None:
            raise ConfigError(
                f"{where}: cannot tell the format of {name!r} from its extension; pass "
                f"name='parquet' (or json, csv, arrow, text) and data_files={name!r}."
            )
    if files is not None:
        _check_files_named_once(files, where)
        if name is None or name in _BUILDER_BY_SUFFIX.values():  # paths from the cwd
            _check_files_exist(files, where)
        if name is None:
            _check_one_format(files, where)
        kwargs["data_files"] = {base: list(files) if isinstance(files, tuple) else files}
        if path is None:
            first = files if isinstance(files, str) else files[0]
            path = builder_for(first)
            if path is None:
                raise ConfigError(
                    f"{where}: cannot tell the format of {first!r} from its extension; "
                    "pass name='parquet' (or json, csv, arrow, text) with data_files."
                )
    if (path == "parquet" and _an_empty_parquet(files)) or (
            files is None and name is not None and _a_parquet_folder_with_an_empty_file(name)):
        kwargs["batch_size"] = _PARQUET_BATCH  # (else read in batches of 0 rows: ArrowInvalid)
    try:
        loaded = datasets.load_dataset(path, **kwargs)
    except DataraxError:
        raise
    except Exception as err:  # datasets raises many types for "not here, not on the Hub"
        if isinstance(err, ValueError) and "Unknown split" in str(err):
            raise DataraxError(f"{where}: {err}") from err
        if _is_local(name, files):  # here, but datasets cannot read it
            raise _unreadable(where, config, err, _empty_files(name, files)) from err
        raise _not_found(where, config) from err
    return dict(loaded)


def _an_empty_parquet(files: Any) -> bool:
    """Whether a local Parquet data file of ``files`` holds no rows: ``datasets`` reads a
    file in batches of its first row group's rows unless given ``batch_size``, and 0 rows
    fail (``ArrowInvalid: BatchSize must be greater than 0``)."""
    entries = [files] if isinstance(files, str) else list(files or ())
    local = [m for f in entries if isinstance(f, str) and not is_remote(f)
             for m in pattern_files(f) if os.path.isfile(m)]
    try:
        import pyarrow.parquet as pq

        return any(pq.read_metadata(f).num_rows == 0 for f in local)
    except Exception:  # noqa: BLE001 - not Parquet after all: datasets names the file
        return False


def _a_parquet_folder_with_an_empty_file(name: str) -> bool:
    """Whether the local folder ``name``'s data files are all Parquet, one of them with
    no rows (see :func:`_an_empty_parquet`)."""
    data = _local_data_files(name, None)
    return bool(data) and all(builder_for(f) == "parquet" for f in data) \
        and _an_empty_parquet(data)


def _local_data_files(name: str | None, files: Any) -> list[str]:
    """The local data files (those with a ``datasets`` builder) that ``files`` names
    (globs expanded), else those of the file or folder ``name`` (hidden folders left
    out)."""
    entries = [files] if isinstance(files, str) else list(files or ())
    found = [m for f in entries if isinstance(f, str) and not is_remote(f)
             for m in pattern_files(f)]
    if not entries and name is not None:
        found = [name] if os.path.isfile(name) else []
        for root, folders, names in os.walk(name):
            folders[:] = [f for f in folders if not f.startswith(".")]
            found += [os.path.join(root, n) for n in sorted(names)]
    return [f for f in found if builder_for(f) is not None]


def _check_files_named_once(files: Any, where: str) -> None:
    """Refuse a local data file named twice (``datasets`` would read it twice)."""
    entries = [files] if isinstance(files, str) else list(files)
    named = [(f, pattern_files(f))
             for f in entries if isinstance(f, str) and not is_remote(f)]
    check_named_once(named, where, "data_files")


def _check_saved_alone(config: HFConfig, where: str) -> None:
    """Refuse ``data_files`` / ``data_dir`` with a ``save_to_disk`` folder, which holds
    its own splits (``load_from_disk`` would ignore them)."""
    extra = [f"{k}={v!r}" for k, v in (("data_files", config.data_files),
                                       ("data_dir", config.data_dir)) if v is not None]
    if extra:
        raise ConfigError(
            f"{where}: {config.name!r} is a folder written by save_to_disk, which holds its "
            f"own splits, so {' and '.join(extra)} would be ignored. Drop them to read the "
            "saved dataset, or pass name=None with data_files to read those files.")


def _check_files_exist(files: Any, where: str) -> None:
    """Refuse a local data file that does not exist, or a pattern that matches none."""
    entries = [files] if isinstance(files, str) else list(files)
    for f in entries:
        if not isinstance(f, str) or is_remote(f):
            continue
        if not all(os.path.exists(m) for m in pattern_files(f)) or not pattern_files(f):
            what = "matches no files" if glob.has_magic(f) else "does not exist"
            raise ConfigError(
                f"{where}: data file {f!r} of data_files {what} (relative paths are read "
                f"from the current folder, {os.getcwd()!r}). Check the path.")


def _check_one_format(files: Any, where: str) -> None:
    """Refuse local data files of several formats: ``datasets`` reads every file as
    the first one's format, and fails on the others as if they were corrupt."""
    entries = [files] if isinstance(files, str) else list(files)
    formats: dict[str, str] = {}
    for f in entries:
        if isinstance(f, str) and not is_remote(f):
            for m in pattern_files(f):
                fmt = builder_for(m)
                if fmt is not None:
                    formats.setdefault(fmt, m)
    if len(formats) > 1:
        named = ", ".join(f"{fmt} ({path!r})" for fmt, path in formats.items())
        raise ConfigError(
            f"{where}: data_files mixes formats: {named}; one split is read with one "
            "format. Convert the files to one format, or read each format with its own "
            "source.")


def _is_local(name: str | None, files: Any) -> bool:
    """True where ``name`` is a local folder or file, or every data file is local."""
    if name is not None and os.path.exists(name):
        return True
    paths = [files] if isinstance(files, str) else list(files or ())
    return bool(paths) and all(os.path.exists(p) or local_glob(p) for p in paths)


def _unreadable(where: str, config: HFConfig, err: BaseException,
                empty: list[str] | None = None) -> DataraxError:
    """A local dataset that ``datasets`` fails to load: its own cause, named (or, where
    every data file is empty, that)."""
    what = repr(config.name) if config.name is not None else f"data_files={config.data_files!r}"
    if empty:
        return DataraxError(
            f"{where}: cannot load dataset {what}: every data file is empty "
            f"({', '.join(repr(p) for p in empty[:3])}{' ...' if len(empty) > 3 else ''}), "
            "so it holds no records. Write records into it, or point at the files that hold them.")
    return DataraxError(f"{where}: cannot load dataset {what}: "
                        f"{unreadable_cause(err.__cause__ or err)}")


def _empty_files(name: str | None, files: Any) -> list[str]:
    """The local data files of ``name`` or ``files`` (:func:`_local_data_files`) when
    every one of them is empty (0 bytes); else ``[]``."""
    found = _local_data_files(name, files)
    if not found or not all(os.path.isfile(p) and os.path.getsize(p) == 0 for p in found):
        return []
    return found


#: what to check when ``datasets`` cannot read a local data file
UNREADABLE_HINT = ("A data file may be corrupt, truncated, not in the format its extension "
                   "says, or hold a column of another type than the first file's; fix or "
                   "remove it.")


def unreadable_cause(err: BaseException) -> str:
    """``err`` as one sentence (Arrow's messages end without a full stop), then the hint.

    Example:
        >>> unreadable_cause(ValueError("bad int")).split(". ")[0]
        'ValueError: bad int'
    """
    text = f"{type(err).__name__}: {str(err).rstrip()}"
    return f"{text}{'' if text.endswith(('.', '!', '?')) else '.'} {UNREADABLE_HINT}"


def _shards_for(length: int) -> int:
    return max(1, min(64, length // 10_000))


def check_split(splits: dict[str, Any], config: HFConfig, where: str) -> None:
    for base in split_names(config.split):
        if base not in splits:
            raise DataraxError(
                f"{where}: split {base!r} is not in dataset {config.name!r}; its splits "
                f"are {sorted(splits)}."
            )


_SPLIT_PART = re.compile(
    r"^(?P<name>[\w.-]+)(\[(?P<lo>-?\d+)?(?P<lo_pct>%)?:(?P<hi>-?\d+)?(?P<hi_pct>%)?\])?"
    r"(\((?P<rounding>[^)]*)\))?$"
)


@dataclass(frozen=True)
class SplitPart:
    """One ``+``-joined part of a split spec: ``train[:10%]`` is ``name="train"``, ``hi=10``,
    ``percent=True``; ``lo``/``hi`` are None where the slice leaves them open."""

    name: str
    spec: str
    lo: int | None
    hi: int | None
    percent: bool

    def bounds(self, length: int) -> tuple[int, int]:
        """``[lo, hi)`` records of a split of ``length`` records, by the library's own
        slice arithmetic (percent rounding included)."""
        from datasets import ReadInstruction

        (absolute,) = ReadInstruction.from_spec(self.spec).to_absolute({self.name: length})
        return int(absolute.from_), int(absolute.to)


def split_parts(split: str, where: str) -> list[SplitPart]:
    """The parts of a split spec (HF slice syntax), e.g. ``"train[:90%]+test"``."""
    parts = []
    for spec in (p.replace(" ", "") for p in split.split("+")):
        match = _SPLIT_PART.match(spec)
        if match is None:
            raise ConfigError(
                f"{where}: cannot parse split {split!r}: {spec!r} is not a split name with an "
                "optional slice, e.g. 'train', 'train[:1000]' or 'train[10%:20%]'."
            )
        lo, hi = match["lo"], match["hi"]
        parts.append(
            SplitPart(
                name=match["name"],
                spec=spec,
                lo=None if lo is None else int(lo),
                hi=None if hi is None else int(hi),
                percent=bool(match["lo_pct"] or match["hi_pct"]),
            )
        )
    return parts


def opened_split(config: HFConfig, where: str, *, streaming: bool,
                 cache_dir: str | None = None) -> tuple[Any, bool]:
    """The split ``config.split`` names, each part sliced as asked (a stream's by
    ``skip`` / ``take``) and the parts joined, and whether it is one split unsliced (a
    stream's shards, its files, can then be read one by one)."""
    lengths: dict[str, int] = {}
    splits = open_splits(config, streaming=streaming, where=where, cache_dir=cache_dir,
                         lengths=lengths)
    check_split(splits, config, where)
    parts = []
    for spec in split_parts(config.split, where):
        part = splits[spec.name]
        if not streaming:
            lo, hi = spec.bounds(len(part))
            if (lo, hi) != (0, len(part)):  # a slice past the end holds no records
                part = part.select(range(lo, hi) if lo < hi else [])
            parts.append(part)
            continue
        lo, hi = spec.lo, spec.hi
        if spec.percent or (lo or 0) < 0 or (hi or 0) < 0:
            length = known_length(part, spec.name)
            if length is None:
                length = lengths.get(spec.name)
            if length is None:
                raise ConfigError(
                    f"{where}: split {config.split!r} slices by percent or from the end, "
                    "which needs the split's size, and this stream does not declare it. "
                    "Slice with absolute record counts (e.g. 'train[:1000]') or use "
                    "HFEagerSource."
                )
            lo, hi = spec.bounds(length)
        if lo:
            part = part.skip(lo)
        if hi is not None:
            part = part.take(max(0, hi - (lo or 0)))
        parts.append(part)
    whole = len(parts) == 1 and parts[0] is splits[split_names(config.split)[0]]
    datasets = datasets_module(where)
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts), whole


def known_length(dataset: Any, split: str) -> int | None:
    info = getattr(dataset, "info", None)
    splits = getattr(info, "splits", None) or {}
    if split in splits and splits[split].num_examples:
        return int(splits[split].num_examples)
    return None


def split_bytes(config: HFConfig, dataset: Any) -> int | None:
    """Declared bytes of the split, else the bytes of its local files (None: unknown)."""
    info = getattr(dataset, "info", None)
    splits = getattr(info, "splits", None) or {}
    bases = split_names(config.split)
    if all(base in splits and splits[base].num_bytes for base in bases):
        return sum(int(splits[base].num_bytes) for base in bases)
    paths: list[str] = []
    if config.data_files is not None:
        files = [config.data_files] if isinstance(config.data_files, str) else list(config.data_files)
        for f in files:
            paths.extend(local_glob(f))
    elif config.name is not None and os.path.exists(config.name):
        if os.path.isfile(config.name):
            paths.append(config.name)
        else:
            for root, _, names in os.walk(config.name):
                paths.extend(os.path.join(root, n) for n in names)
    elif config.name is not None and glob.has_magic(config.name):
        paths.extend(local_glob(config.name))
    if not paths:
        return None
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
