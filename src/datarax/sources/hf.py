"""Hugging Face ``datasets`` sources: eager (device arrays) and streaming (host reads).

* :class:`HFEagerSource` loads a split once into device arrays and is an *indexed*
  source (the compiled pipeline path): it is a :class:`~datarax.sources.MemorySource`
  filled from the dataset, with the same Feistel shuffle (``seed + epoch``), stable
  indices and tiny state. Text cannot live on the device: a text field is refused
  with an error naming it; drop it with ``exclude_keys`` or stream instead.
* :class:`HFStreamingSource` wraps a ``datasets.IterableDataset``
  (``load_dataset(..., streaming=True)``), reads Arrow chunks of ``chunk_size``
  records and keeps memory bounded by ``chunk_size`` (plus ``shuffle_buffer_size``
  when shuffling). Its batches carry text fields as lists of ``str`` that operators
  can read and route. Each pass (``for batch in pipeline``) re-opens the stream;
  ``get_state()`` is ``{"current_index", "current_epoch"}`` and ``set_state`` resumes
  exactly by re-opening the same pass and skipping the records already handed out
  (read as Arrow, not decoded), so resume costs one forward read of those records.
  With ``on_error="skip"`` a record that cannot be converted to the declared fields
  is dropped, counted (state key ``"skipped"``) and reported (``skipped_records()``).

``name`` may be a Hub id (``"stanfordnlp/sst2"``), a local folder of data files
(parquet/json/csv/arrow, laid out as on the Hub: ``data/train-*.parquet`` ...), a
folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or a data
file / glob (``"data/*.parquet"``). A name that is a local folder is read from
there, never from the Hub, which is how offline use works. ``split`` accepts HF slice
syntax (``"train[:1000]"``, ``"train[10%:20%]"``, ``"train+validation"``); a
streaming source needs the split's size for percent or negative slices.

``Image`` features are decoded to uint8 arrays (one shape per field). 64-bit
columns follow :mod:`datarax.sources._columns`: with ``jax_enable_x64`` off,
int64 labels become int32 when every value fits (checked), float64 is refused unless
``cast_float64=True``.

Needs the ``hf`` extra: ``pip install "datarax[hf]"``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_int
from datarax.core.data_source import Batch, DataSourceModule
from datarax.core.errors import ConfigError, DataraxError, RecordError, StateError
from datarax.core.spec import TextSpec
from datarax.sources._columns import (
    as_text,
    fit_64bit,
    is_text_array,
    refuse_text,
    select_keys,
    spec_of_columns,
)
from datarax.sources._dataset_config import check_dataset_fields, empty_split
from datarax.sources._optional import require
from datarax.sources.host_reader import MAX_REPORTS, ErrorPolicy, SkippedRecord
from datarax.sources.memory import MemorySource
from datarax.sources.random_access import BadRecordFields

#: ``from_hf`` picks the eager source for splits known to be at most this many bytes.
EAGER_MAX_BYTES = 256 * 2**20

_BUILDER_BY_SUFFIX = {
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".arrow": "arrow",
    ".txt": "text",
}


# ---------------------------------------------------------------------- configs
@dataclass(frozen=True)
class _HFConfig(StructuralConfig):
    name: str | None = None
    split: str = "train"
    data_files: str | tuple[str, ...] | None = None
    data_dir: str | None = None
    include_keys: tuple[str, ...] | None = None
    exclude_keys: tuple[str, ...] | None = None
    shuffle: bool = False
    seed: int = 42
    cast_float64: bool = False
    track_metadata: bool = False
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        cls = type(self).__name__
        if self.name is not None and not (isinstance(self.name, str) and self.name):
            raise ConfigError(f"{cls}.name must be a non-empty str or None, got {self.name!r}.")
        check_dataset_fields(self)
        files = self.data_files
        if files is not None:
            if isinstance(files, str):
                pass
            elif isinstance(files, Sequence) and files and all(isinstance(f, str) for f in files):
                object.__setattr__(self, "data_files", tuple(files))
            else:
                raise ConfigError(
                    f"{cls}.data_files must be a path/glob or a list of them (the files of "
                    f"split '{self.split}'), got {files!r}."
                )
        if self.name is None and files is None:
            raise ConfigError(
                f"{cls} needs name= (a Hub id, a local folder or file) or data_files=."
            )


@dataclass(frozen=True)
class HFEagerConfig(_HFConfig):
    """Configuration of :class:`HFEagerSource`.

    Attributes:
        name: Hub id, local folder (data files or ``save_to_disk`` output) or data file/glob.
        split: split with optional HF slicing, e.g. ``"train[:80%]"``.
        data_files: path/glob or list of them holding split ``split`` (``name`` then
            names the builder, e.g. ``"parquet"``, or may be omitted).
        data_dir: sub-folder of the dataset to read (``load_dataset(data_dir=...)``).
        include_keys / exclude_keys: fields to keep / drop (unknown names are refused).
        shuffle, seed: Feistel permutation per epoch (``seed + epoch``), O(1) memory.
        cast_float64: cast float64 fields to float32 while x64 is off (else refused).
        track_metadata, num_epochs: as in :class:`~datarax.sources.MemorySourceConfig`.
        streaming: must stay False (use :class:`HFStreamingConfig` to stream).
    """

    streaming: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming is not False:
            raise ConfigError(
                "HFEagerConfig.streaming must be False; use HFStreamingConfig / "
                "HFStreamingSource to stream."
            )


@dataclass(frozen=True)
class HFStreamingConfig(BadRecordFields, _HFConfig):
    """Configuration of :class:`HFStreamingSource` (fields of :class:`HFEagerConfig`, plus).

    Attributes:
        streaming: must stay True (use :class:`HFEagerConfig` to load eagerly).
        chunk_size: records read per Arrow chunk; bounds memory with the buffer below.
        shuffle_buffer_size: with ``shuffle=True`` a stream cannot be permuted globally
            (no random access); pass ``e`` reads the shards (files) in an order drawn
            from ``seed + e`` and mixes records through a rolling buffer of this many
            records (same seed, same order).
        on_error: ``"raise"`` (default) stops at a record that cannot be converted to
            the declared fields (an image that does not decode, a value that cannot be
            cast, a field shaped unlike the first record's); ``"skip"`` drops it, counts
            it (``source.skipped_records()``, ``get_state()["skipped"]``) and goes on.
        max_skipped: with ``"skip"``, most records one pass may skip (None: no limit).
        max_skipped_fraction: with ``"skip"``, most records one pass may skip as a
            fraction of the pass (checked as it goes when the split declares its size,
            else at the end of the pass).
    """

    streaming: bool = True
    chunk_size: int = 1024
    shuffle_buffer_size: int = 1000
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming is not True:
            raise ConfigError(
                "HFStreamingConfig.streaming must be True; use HFEagerConfig / "
                "HFEagerSource to load the split into memory."
            )
        check_int(self, "chunk_size", minimum=1)
        check_int(self, "shuffle_buffer_size", minimum=1)
        self.error_policy()


# ---------------------------------------------------------------------- loading
def _datasets(user: str) -> Any:
    return require("datasets", extra="hf", user=user)


def _is_saved_to_disk(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, f))
        for f in ("dataset_dict.json", "state.json")
    )


def _builder_for(path: str) -> str | None:
    for suffix, builder in _BUILDER_BY_SUFFIX.items():
        if path.endswith(suffix) or path.endswith(suffix + ".gz"):
            return builder
    return None


def _split_names(split: str) -> list[str]:
    return [part.split("[")[0].strip() for part in split.split("+")]


def _not_found(where: str, config: _HFConfig) -> DataraxError:
    what = repr(config.name) if config.name is not None else f"data_files={config.data_files!r}"
    return DataraxError(
        f"{where}: dataset {what} was not found: it is not a local folder or data file, "
        "and the Hugging Face Hub does not have it or cannot be reached (offline). Pass "
        "a Hub id, a local dataset folder (e.g. one written by save_to_disk) or data files."
    )


def _open_splits(config: _HFConfig, *, streaming: bool, where: str) -> dict[str, Any]:
    """All splits of the dataset ``config`` names (lazy for streams), keyed by name."""
    datasets = _datasets(where)
    name = config.name
    base = _split_names(config.split)[0]
    kwargs: dict[str, Any] = {"streaming": streaming}
    if config.data_dir is not None:
        kwargs["data_dir"] = config.data_dir
    if name is not None and _is_saved_to_disk(name):
        loaded = datasets.load_from_disk(name)
        if isinstance(loaded, datasets.Dataset):
            loaded = {str(loaded.split or "train"): loaded}
        splits = dict(loaded)
        if streaming:
            splits = {k: v.to_iterable_dataset(num_shards=_shards_for(len(v))) for k, v in splits.items()}
        return splits
    path = name
    files = config.data_files
    if files is None and name is not None and (
        os.path.isfile(name) or (glob.has_magic(name) and glob.glob(name))
    ):
        path, files = _builder_for(name), name
        if path is None:
            raise ConfigError(
                f"{where}: cannot tell the format of {name!r} from its extension; pass "
                f"name='parquet' (or json, csv, arrow, text) and data_files={name!r}."
            )
    if files is not None:
        kwargs["data_files"] = {base: list(files) if isinstance(files, tuple) else files}
        if path is None:
            first = files if isinstance(files, str) else files[0]
            path = _builder_for(first)
            if path is None:
                raise ConfigError(
                    f"{where}: cannot tell the format of {first!r} from its extension; "
                    "pass name='parquet' (or json, csv, arrow, text) with data_files."
                )
    try:
        loaded = datasets.load_dataset(path, **kwargs)
    except DataraxError:
        raise
    except Exception as err:  # datasets raises many types for "not here, not on the Hub"
        if isinstance(err, ValueError) and "Unknown split" in str(err):
            raise DataraxError(f"{where}: {err}") from err
        raise _not_found(where, config) from err
    return dict(loaded)


def _shards_for(length: int) -> int:
    return max(1, min(64, length // 10_000))


def _check_split(splits: dict[str, Any], config: _HFConfig, where: str) -> None:
    for base in _split_names(config.split):
        if base not in splits:
            raise DataraxError(
                f"{where}: split {base!r} is not in dataset {config.name!r}; its splits "
                f"are {sorted(splits)}."
            )


def _relative_instructions(split: str, where: str) -> list[Any]:
    from datasets.arrow_reader import ReadInstruction

    try:
        return list(ReadInstruction.from_spec(split)._relative_instructions)
    except (AssertionError, ValueError) as err:
        raise ConfigError(f"{where}: cannot parse split {split!r}: {err}") from err


def _to_absolute(rel: Any, lengths: dict[str, int]) -> Any:
    from datasets.arrow_reader import _rel_to_abs_instr

    return _rel_to_abs_instr(rel, lengths)


# ------------------------------------------------------------- arrow -> numpy
def _arrow_to_numpy(column: Any, name: str, where: str) -> np.ndarray:
    """One Arrow column as a numpy array (text as an object array of str)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if column.null_count:
        first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataraxError(
            f"{where}: field '{name}' is missing a value (None) at record {first} of the "
            "chunk being read; fill missing values (Dataset.map) or drop the field "
            "(exclude_keys)."
        )
    if pa.types.is_dictionary(kind):
        return _arrow_to_numpy(column.dictionary_decode(), name, where)
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or getattr(pa.types, "is_string_view", lambda t: False)(kind)
    ):
        return as_text(column.to_numpy(zero_copy_only=False))
    n = len(column)
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
        inner = column.flatten()
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = column.offsets.to_numpy()
        lengths = np.diff(offsets)
        if n and (lengths != lengths[0]).any():
            bad = int(np.flatnonzero(lengths != lengths[0])[0])
            raise DataraxError(
                f"{where}: field '{name}' holds lists of different lengths (record 0 has "
                f"{int(lengths[0])}, record {bad} has {int(lengths[bad])}); batches need "
                "one shape per field. Pad or truncate it first, or drop it (exclude_keys)."
            )
        width = int(lengths[0]) if n else 0
        inner = column.flatten()
    elif pa.types.is_struct(kind):
        raise DataraxError(
            f"{where}: field '{name}' is a nested struct ({kind}); datarax batches hold "
            "arrays and text. Flatten it first (Dataset.flatten()) or drop it (exclude_keys)."
        )
    else:
        array = column.to_numpy(zero_copy_only=False)
        if array.dtype == object:
            raise DataraxError(
                f"{where}: field '{name}' has Arrow type {kind}, which datarax cannot turn "
                "into an array; convert it first or drop it (exclude_keys)."
            )
        return array
    values = _arrow_to_numpy(inner, name, where)
    return values.reshape((n, width) + values.shape[1:])


def _table_to_columns(
    table: Any,
    keys: Sequence[str],
    config: _HFConfig,
    where: str,
    first_record: int = 0,
    features: Any = None,
) -> dict[str, np.ndarray]:
    columns = {}
    for key in keys:
        feature = features.get(key) if features is not None else None
        if _is_image(feature):
            array = _decode_images(table.column(key), feature, key, where, first_record)
        else:
            array = _arrow_to_numpy(table.column(key), key, where)
        if not is_text_array(array):
            array = fit_64bit(
                key, array, where=where, cast_float64=config.cast_float64, first_record=first_record
            )
        columns[key] = array
    return columns


def _is_image(feature: Any) -> bool:
    return type(feature).__name__ == "Image" and type(feature).__module__.startswith("datasets")


def _decode_images(column: Any, feature: Any, name: str, where: str, first_record: int) -> np.ndarray:
    """An HF ``Image`` column (encoded bytes) as one stacked uint8 array."""
    images = []
    for i, value in enumerate(column.to_pylist()):
        if value is None:
            raise DataraxError(
                f"{where}: field '{name}' is missing an image (None) at record "
                f"{first_record + i}; fill or filter it first, or drop the field (exclude_keys)."
            )
        images.append(np.asarray(feature.decode_example(value)))
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        bad = next(i for i, im in enumerate(images) if im.shape != images[0].shape)
        raise DataraxError(
            f"{where}: field '{name}' holds images of different shapes (record "
            f"{first_record} is {images[0].shape}, record {first_record + bad} is "
            f"{images[bad].shape}); resize them to one shape first (Dataset.map), or drop "
            "the field (exclude_keys)."
        )
    return np.stack(images)


# ------------------------------------------------------------------- eager
class HFEagerSource(MemorySource):
    """A Hugging Face split loaded once into device arrays (indexed, compiled path).

    Everything about serving is :class:`~datarax.sources.MemorySource`'s: Feistel
    shuffle keyed by ``seed + epoch``, ``record_indices_at`` (stable index = row in the
    split), ``len``, ``element_spec`` and ``{"current_index", "current_epoch"}`` state.
    Text fields are refused (name them in ``exclude_keys``, or stream).

    Example:
        >>> from datarax.sources import HFEagerSource, HFEagerConfig
        >>> src = HFEagerSource(HFEagerConfig(name="my_local_folder", split="train",  # doctest: +SKIP
        ...                                   exclude_keys=("sentence",), shuffle=True))
        >>> src.get_batch_at(0, 4)["label"]  # doctest: +SKIP
    """

    config: HFEagerConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: HFEagerConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, HFEagerConfig):
            raise ConfigError(
                f"HFEagerSource needs an HFEagerConfig, got {type(config).__name__}."
            )
        where = "HFEagerSource"
        columns = _load_eager_columns(config, where)
        super().__init__(config, columns, rngs=rngs, name=name)  # type: ignore[arg-type]


def _load_eager_columns(config: HFEagerConfig, where: str) -> dict[str, np.ndarray]:
    datasets = _datasets(where)
    splits = _open_splits(config, streaming=False, where=where)
    _check_split(splits, config, where)
    lengths = {k: len(v) for k, v in splits.items()}
    parts = []
    for rel in _relative_instructions(config.split, where):
        absolute = _to_absolute(rel, lengths)
        part = splits[absolute.splitname]
        lo, hi = absolute.from_, absolute.to
        if (lo, hi) != (0, len(part)):
            part = part.select(range(lo, hi))
        parts.append(part)
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    keys = select_keys(list(ds.column_names), config.include_keys, config.exclude_keys, where=where)
    if len(ds) == 0:
        raise empty_split(config, where)
    table = ds.select_columns(keys).with_format("arrow")[:]
    columns = _table_to_columns(table, keys, config, where, features=ds.features)
    refuse_text(columns, where=where, streaming_hint="HFStreamingSource (from_hf(..., streaming=True))")
    return columns


# --------------------------------------------------------------- streaming
class HFStreamingSource(DataSourceModule):
    """A Hugging Face ``IterableDataset`` read chunk by chunk on the host.

    One pass per ``for batch in pipeline`` (the Pipeline calls ``start_epoch``), memory
    bounded by ``chunk_size`` (+ ``shuffle_buffer_size``), text fields served as lists
    of ``str``, exact mid-epoch resume from ``{"current_index", "current_epoch"}``.
    With several processes (``Pipeline(shard_count=...)``) each keeps every
    ``count``-th record of the stream. The stable index of a record is its position
    in the pass's stream (in the shuffled stream when ``shuffle=True``). With
    ``on_error="skip"`` bad records are dropped within the ``max_skipped`` /
    ``max_skipped_fraction`` budget, reported by :meth:`skipped_records` and counted
    in the state (``"skipped"``), so resume re-skips them without counting them twice.

    Example:
        >>> from flax import nnx
        >>> from datarax.sources import HFStreamingSource, HFStreamingConfig
        >>> config = HFStreamingConfig(name="stanfordnlp/sst2", split="train", streaming=True)
        >>> source = HFStreamingSource(config, rngs=nnx.Rngs(0))  # doctest: +SKIP
        >>> source.element_spec()["sentence"]  # doctest: +SKIP
        TextSpec(shape=())
    """

    config: HFStreamingConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: HFStreamingConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, HFStreamingConfig):
            raise ConfigError(
                f"HFStreamingSource needs an HFStreamingConfig, got {type(config).__name__}."
            )
        super().__init__(config, rngs=rngs, name=name)
        where = "HFStreamingSource"
        dataset, keys, by_shard = _open_stream(config, where)
        self._dataset = nnx.static(dataset)
        first = next(iter(dataset.with_format("arrow").iter(batch_size=min(config.chunk_size, 64))), None)
        if first is None or first.num_rows == 0:
            raise empty_split(config, where)
        features = dataset.features
        policy = config.error_policy()
        try:
            columns = _table_to_columns(first, keys, config, where, features=features)
        except DataraxError:
            if not policy.skips:
                raise
            columns = _first_good_record(first, keys, config, where, features)
        except Exception as err:  # e.g. an image that does not decode
            if not policy.skips:
                raise _record_error(first, keys, config, features, 0, 0, err) from err
            columns = _first_good_record(first, keys, config, where, features)
        spec = spec_of_columns(columns)
        self._spec = nnx.static(tuple(spec.items()))  # hashable static structure
        length = _known_length(dataset, _split_names(config.split)[0]) if by_shard else None
        self.skipped = nnx.Variable(0)  # records skipped this pass before the cursor
        self._reader = nnx.static(
            _StreamReader(self, dataset, tuple(keys), by_shard, policy, length)
        )

    # ------------------------------------------------------------- contract
    def element_spec(self) -> dict[str, Any]:
        """Fields, per-record shapes and dtypes (text: ``TextSpec``), from the first chunk."""
        return dict(self._spec)

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next batch of the current pass (None at its end)."""
        return self.get_batch_with_indices(batch_size)[0]

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        reader = self._reader
        if not reader.is_open:
            reader.open(self._cursor.epoch, skip=self._cursor.index, skipped=self._skipped())
        got = reader.read(batch_size)
        self.skipped.set_value(reader.skipped)
        self._cursor.current_index.set_value(reader.consumed)
        if got is None:
            return None, None
        columns, indices = got
        batch = {k: (v.tolist() if is_text_array(v) else v) for k, v in columns.items()}
        return batch, indices

    def skipped_records(self) -> list[SkippedRecord]:
        """Records dropped under ``on_error="skip"`` so far: pass, position and cause.

        ``position`` counts this process's records of the pass (handed out or
        skipped), ``index`` is the record's position in the pass's stream (also in
        ``index_in_file``); ``path`` is None (a stream does not say which file).
        """
        return self._reader.skipped_records()

    def _skipped(self) -> int:
        return int(self.skipped.get_value())

    def start_epoch(self, epoch: int) -> None:
        """Start pass ``epoch`` from its first record (the stream is re-opened lazily)."""
        self._cursor.start_epoch(epoch)
        self.skipped.set_value(0)
        self._reader.close()

    def close_epoch(self) -> None:
        """Release the open stream (the position is kept; reading re-opens and skips)."""
        self._reader.close()

    def get_state(self) -> dict[str, Any]:
        """``current_index`` (records of the pass handed out or skipped) and
        ``current_epoch``; with ``on_error="skip"`` also ``skipped`` (records skipped
        before ``current_index``)."""
        state = super().get_state()
        if self.config.on_error == "skip":
            state["skipped"] = self._skipped()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state``: the pass is re-opened and the records it covers
        (handed out or skipped) are passed over unread. A state without
        ``"skipped"`` counts no skips."""
        where = "HFStreamingSource"
        skipped = state.get("skipped", 0) if isinstance(state, dict) else 0
        if isinstance(skipped, bool) or not isinstance(skipped, int) or skipped < 0:
            raise StateError(
                f"{where} state 'skipped' must be a non-negative int, got {skipped!r}.",
                field="skipped",
            )
        super().set_state(state)
        if skipped > self._cursor.index:
            raise StateError(
                f"{where} state says {skipped} records were skipped before position "
                f"{self._cursor.index}; the state was tampered with.",
                field="skipped",
            )
        self.skipped.set_value(skipped)
        self._reader.close()

    def __iter__(self) -> HFStreamingSource:
        if self._reader.ended:
            self.start_epoch(0)
        return self


class _StreamReader:
    """The open pass of an :class:`HFStreamingSource`: Arrow chunks, sharded and converted.

    ``consumed`` counts this shard's records of the pass handed out or skipped;
    ``skipped`` the bad records before ``consumed`` (``on_error="skip"``).
    """

    def __init__(
        self,
        source: HFStreamingSource,
        dataset: Any,
        keys: tuple[str, ...],
        by_shard: bool,
        policy: ErrorPolicy,
        length: int | None,
    ) -> None:
        self._source = source
        self._dataset = dataset
        self._by_shard = by_shard
        self._keys = keys
        self._policy = policy
        self._length = length  # records in the split, when the stream declares it
        self._reports: list[SkippedRecord] = []
        self._tables: Any = None
        self.ended = False
        self.close()

    @property
    def is_open(self) -> bool:
        return self._tables is not None

    def close(self) -> None:
        tables, self._tables = self._tables, None
        if tables is not None and hasattr(tables, "close"):
            tables.close()
        self._chunk: dict[str, np.ndarray] | None = None
        self._indices = np.zeros(0, np.int64)
        self._ordinals = np.zeros(0, np.int64)
        self._offset = 0
        self._stream_position = 0
        self._ordinal = 0  # this shard's records pulled from the stream
        self._epoch = 0
        self.consumed = 0
        self.skipped = 0
        self._pulled_skips = 0
        self._pending: list[tuple[int, int, str]] = []  # (ordinal, position, cause)
        self.ended = False

    def open(self, epoch: int, *, skip: int, skipped: int = 0) -> None:
        """Open pass ``epoch``, drop its first ``skip`` records of this shard (of which
        ``skipped`` were bad records skipped before)."""
        self.close()
        self._epoch = int(epoch)
        self.consumed = int(skip)
        self.skipped = self._pulled_skips = int(skipped)
        config = self._source.config
        dataset = self._dataset
        if config.shuffle:
            self._tables = _shuffled_tables(
                dataset,
                by_shard=self._by_shard,
                chunk_size=config.chunk_size,
                buffer_size=config.shuffle_buffer_size,
                seed=(config.seed + epoch) % 2**32,
            )
        else:
            self._tables = iter(dataset.with_format("arrow").iter(batch_size=config.chunk_size))
        while skip > 0:
            got = self._next_table()
            if got is None:
                raise StateError(
                    f"HFStreamingSource: the restored state says {skip} more records were "
                    f"handed out in epoch {epoch} than the stream holds; the state comes "
                    "from a different dataset or split.",
                    field="current_index",
                )
            table, positions, ordinals = got
            if len(positions) <= skip:
                skip -= len(positions)
                continue
            self._set_chunk(table.slice(skip), positions[skip:], ordinals[skip:])
            skip = 0

    def read(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """Up to ``batch_size`` records of the pass (None at its end)."""
        parts: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
        need = batch_size
        end = self.consumed
        while need > 0:
            if self._chunk is None or self._offset >= len(self._indices):
                got = self._next_table()
                if got is None:
                    self._chunk = None
                    break
                self._set_chunk(*got)
                continue
            assert self._chunk is not None
            take = min(need, len(self._indices) - self._offset)
            sl = slice(self._offset, self._offset + take)
            parts.append(({k: v[sl] for k, v in self._chunk.items()}, self._indices[sl]))
            end = int(self._ordinals[self._offset + take - 1]) + 1
            self._offset += take
            need -= take
        if not parts:
            self._commit(self._ordinal)
            self._check_pass_fraction()
            self.ended = True
            return None
        self._commit(end)
        if len(parts) == 1:
            return parts[0]
        columns = {k: np.concatenate([p[0][k] for p in parts]) for k in self._keys}
        return columns, np.concatenate([p[1] for p in parts])

    def skipped_records(self) -> list[SkippedRecord]:
        """Reports of records skipped so far (first ``MAX_REPORTS``), in order."""
        return list(self._reports)

    def _next_table(self) -> tuple[Any, np.ndarray, np.ndarray] | None:
        """The next non-empty Arrow chunk of this shard, its stream positions and its
        ordinals among this shard's records."""
        import pyarrow as pa

        while True:
            table = next(self._tables, None)
            if table is None:
                return None
            n = table.num_rows
            positions = np.arange(self._stream_position, self._stream_position + n, dtype=np.int64)
            self._stream_position += n
            index, count = self._source.shard
            if count > 1:
                keep = positions % count == index
                table = table.filter(pa.array(keep))
                positions = positions[keep]
            if len(positions):
                ordinals = np.arange(self._ordinal, self._ordinal + len(positions), dtype=np.int64)
                self._ordinal += len(positions)
                return table, positions, ordinals

    def _set_chunk(self, table: Any, positions: np.ndarray, ordinals: np.ndarray) -> None:
        source = self._source
        try:
            columns = _table_to_columns(
                table,
                self._keys,
                source.config,
                _WHERE,
                first_record=int(positions[0]),
                features=self._dataset.features,
            )
            if self._policy.skips:
                _check_spec(columns, source.element_spec())
        except Exception as err:  # noqa: BLE001 - located per record below
            if not self._policy.skips:
                if isinstance(err, DataraxError):
                    raise
                raise _record_error(
                    table,
                    self._keys,
                    source.config,
                    self._dataset.features,
                    int(positions[0]),
                    self._epoch,
                    err,
                ) from err
            columns, keep = self._convert_records(table, positions, ordinals)
            positions, ordinals = positions[keep], ordinals[keep]
        self._chunk = columns
        self._indices = positions
        self._ordinals = ordinals
        self._offset = 0

    def _convert_one(self, table: Any, i: int, position: int) -> dict[str, np.ndarray]:
        source = self._source
        columns = _table_to_columns(
            table.slice(i, 1),
            self._keys,
            source.config,
            _WHERE,
            first_record=position,
            features=self._dataset.features,
        )
        _check_spec(columns, source.element_spec())
        return columns

    def _convert_records(
        self, table: Any, positions: np.ndarray, ordinals: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Convert record by record, skipping (and counting) the ones that fail."""
        good: list[dict[str, np.ndarray]] = []
        keep = np.zeros(len(positions), bool)
        for i, (position, ordinal) in enumerate(zip(positions.tolist(), ordinals.tolist())):
            try:
                good.append(self._convert_one(table, i, position))
            except Exception as err:  # noqa: BLE001 - counted and reported
                self._fail(ordinal, position, _cause(err))
                continue
            keep[i] = True
        if not good:
            return {}, keep
        return {k: np.concatenate([g[k] for g in good]) for k in self._keys}, keep

    def _fail(self, ordinal: int, position: int, cause: str) -> None:
        """Count a bad record pulled from the stream; raise past the skip budget."""
        self._pending.append((ordinal, position, cause))
        self._pulled_skips += 1
        size = self._shard_length()
        budget = self._policy.budget(size) if size is not None else self._policy.max_skipped
        if budget is not None and self._pulled_skips > budget:
            raise self._over_budget(self._pulled_skips, budget, size, position, cause)

    def _check_pass_fraction(self) -> None:
        """With an unknown pass size, ``max_skipped_fraction`` is checked at its end."""
        if self._shard_length() is not None or self._policy.max_skipped_fraction is None:
            return
        budget = self._policy.budget(self.consumed)
        assert budget is not None
        if self.skipped > budget:
            last = self._reports[-1] if self._reports else None
            raise self._over_budget(
                self.skipped,
                budget,
                self.consumed,
                last.index if last else None,
                last.cause if last else "(not reported)",
            )

    def _over_budget(
        self, count: int, budget: int, size: int | None, position: int | None, cause: str
    ) -> RecordError:
        policy = self._policy
        of = f" of {size} records" if size is not None else ""
        return RecordError(
            f"{_WHERE}: skipped {count} bad records in epoch {self._epoch}, over the "
            f"budget of {budget} (max_skipped={policy.max_skipped}, max_skipped_fraction="
            f"{policy.max_skipped_fraction}{of}). Latest: record {position}: "
            f"{cause.rstrip('.')}. Raise the skip budget or fix the data.",
            index=position,
        )

    def _commit(self, end: int) -> None:
        """Count bad records before ordinal ``end`` as skipped; ``end`` is consumed."""
        while self._pending and self._pending[0][0] < end:
            ordinal, position, cause = self._pending.pop(0)
            self.skipped += 1
            if len(self._reports) < MAX_REPORTS:
                self._reports.append(
                    SkippedRecord(self._epoch, ordinal, position, None, position, cause)
                )
        self.consumed = end

    def _shard_length(self) -> int | None:
        """Records of this shard in one pass, when the split declares its size."""
        if self._length is None:
            return None
        index, count = self._source.shard
        return len(range(index, self._length, count))


_WHERE = "HFStreamingSource"


def _cause(err: BaseException) -> str:
    """What went wrong with one record, for messages and reports."""
    if isinstance(err, DataraxError):
        return str(err).removeprefix(f"{_WHERE}: ")
    return f"{type(err).__name__}: {err}"


def _record_error(
    table: Any,
    keys: Sequence[str],
    config: _HFConfig,
    features: Any,
    first_position: int,
    epoch: int,
    err: BaseException,
) -> RecordError:
    """``on_error="raise"``: the error naming the first record of ``table`` (whose
    first record is at stream position ``first_position``) that fails alone."""
    position, cause = first_position, err
    for i in range(table.num_rows):
        try:
            _table_to_columns(table.slice(i, 1), keys, config, _WHERE, first_position + i, features)
        except Exception as one:  # noqa: BLE001 - reported with location
            position, cause = first_position + i, one
            break
    return RecordError(
        f"{_WHERE}: cannot convert record {position} of split {config.split!r} "
        f"(epoch {epoch}): {_cause(cause)}. Fix or filter the data, or construct the "
        "source with on_error='skip' to drop bad records (they are counted and reported).",
        index=position,
    )


def _check_spec(columns: dict[str, np.ndarray], spec: dict[str, Any]) -> None:
    """Refuse converted columns whose per-record shape or dtype differs from ``spec``."""
    for key, want in spec.items():
        got = columns[key]
        if isinstance(want, TextSpec):
            if is_text_array(got) and tuple(got.shape[1:]) == tuple(want.shape):
                continue
            have = "text" if is_text_array(got) else f"{got.dtype}"
            raise DataraxError(
                f"{_WHERE}: field '{key}' is {have} of shape {tuple(got.shape[1:])}, but the "
                f"first record's is text of shape {tuple(want.shape)}."
            )
        if (
            not is_text_array(got)
            and tuple(got.shape[1:]) == tuple(want.shape)
            and got.dtype == want.dtype
        ):
            continue
        have = "text" if is_text_array(got) else f"{got.dtype}"
        raise DataraxError(
            f"{_WHERE}: field '{key}' is {have} of shape {tuple(got.shape[1:])}, but the "
            f"first record's is {want.dtype} of shape {tuple(want.shape)}."
        )


def _first_good_record(
    table: Any, keys: Sequence[str], config: _HFConfig, where: str, features: Any
) -> dict[str, np.ndarray]:
    """``on_error="skip"``: the fields of the first record of ``table`` that converts
    (the first failure when none does)."""
    first: BaseException | None = None
    for i in range(table.num_rows):
        try:
            return _table_to_columns(table.slice(i, 1), keys, config, where, i, features)
        except Exception as err:  # noqa: BLE001 - the first one is re-raised
            first = first or err
    assert first is not None
    raise first


def _open_stream(config: HFStreamingConfig, where: str) -> tuple[Any, list[str], bool]:
    """The split (sliced as asked) as one ``IterableDataset``, the fields to keep, and
    whether its shards (files) can be read one by one (unsliced, one split)."""
    datasets = _datasets(where)
    splits = _open_splits(config, streaming=True, where=where)
    _check_split(splits, config, where)
    parts = []
    for rel in _relative_instructions(config.split, where):
        part = splits[rel.splitname]
        lo, hi, unit = rel.from_, rel.to, rel.unit
        if lo is None and hi is None:
            parts.append(part)
            continue
        if unit == "%" or (lo or 0) < 0 or (hi or 0) < 0:
            length = _known_length(part, rel.splitname)
            if length is None:
                raise ConfigError(
                    f"{where}: split {config.split!r} slices by percent or from the end, "
                    "which needs the split's size, and this stream does not declare it. "
                    "Slice with absolute record counts (e.g. 'train[:1000]') or use "
                    "HFEagerSource."
                )
            absolute = _to_absolute(rel, {rel.splitname: length})
            lo, hi = absolute.from_, absolute.to
        lo = lo or 0
        if lo:
            part = part.skip(lo)
        if hi is not None:
            part = part.take(max(0, hi - lo))
        parts.append(part)
    dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    columns = list(dataset.column_names or [])
    if not columns:
        first = next(iter(dataset.with_format("arrow").iter(batch_size=1)), None)
        if first is None:
            raise empty_split(config, where)
        columns = list(first.column_names)
    keys = select_keys(columns, config.include_keys, config.exclude_keys, where=where)
    by_shard = len(parts) == 1 and parts[0] is splits[_split_names(config.split)[0]]
    return dataset, keys, by_shard


def _shuffled_tables(
    dataset: Any, *, by_shard: bool, chunk_size: int, buffer_size: int, seed: int
) -> Any:
    """Arrow tables of one shuffled pass: shards (files) in a seeded order, records
    mixed through a rolling buffer of ``buffer_size`` records (``datasets``' scheme,
    read shard after shard, so memory stays at about ``buffer_size + chunk_size``)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    shards = int(getattr(dataset, "num_shards", 1) or 1) if by_shard else 1
    order = rng.permutation(shards) if shards > 1 else np.zeros(1, np.int64)
    tables: list[Any] = []
    held = 0
    for index in order:
        part = dataset.shard(num_shards=shards, index=int(index)) if shards > 1 else dataset
        for table in part.with_format("arrow").iter(batch_size=chunk_size):
            tables.append(table)
            held += table.num_rows
            if held >= buffer_size:
                mixed = pa.concat_tables(tables).take(rng.permutation(held))
                keep = buffer_size // 2
                yield mixed.slice(0, held - keep)
                tables, held = [mixed.slice(held - keep)], keep
    if held:
        yield pa.concat_tables(tables).take(rng.permutation(held))


def _known_length(dataset: Any, split: str) -> int | None:
    info = getattr(dataset, "info", None)
    splits = getattr(info, "splits", None) or {}
    if split in splits and splits[split].num_examples:
        return int(splits[split].num_examples)
    return None


# ---------------------------------------------------------------- factory
_STREAM_ONLY = {"chunk_size", "shuffle_buffer_size", "on_error", "max_skipped", "max_skipped_fraction"}


def from_hf(
    name: str | None,
    split: str = "train",
    *,
    streaming: bool | None = None,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> HFEagerSource | HFStreamingSource:
    """An HF source for ``name``/``split``: eager or streaming.

    ``streaming=True`` / ``False`` chooses explicitly and always wins. With
    ``streaming=None`` the split is streamed unless all of these hold, in which case
    it is loaded eagerly (:class:`HFEagerSource`):

    * its size is known and at most :data:`EAGER_MAX_BYTES` (256 MiB): the size the
      dataset declares for the split, else the bytes of its local files;
    * none of the kept fields is text (text cannot live on the device);
    * no streaming-only option (``chunk_size``, ``shuffle_buffer_size``, ``on_error``,
      ``max_skipped``, ``max_skipped_fraction``) is given.

    ``config`` holds further config fields (``shuffle``, ``seed``, ``include_keys``,
    ``data_files``, ...).

    Example:
        >>> from flax import nnx
        >>> from datarax.sources import from_hf
        >>> source = from_hf("stanfordnlp/sst2", "train", streaming=True, rngs=nnx.Rngs(0))  # doctest: +SKIP
    """
    if streaming not in (None, True, False):
        raise ConfigError(f"from_hf streaming must be True, False or None, got {streaming!r}.")
    if streaming is False:
        return HFEagerSource(HFEagerConfig(name=name, split=split, **config), rngs=rngs)
    stream = HFStreamingSource(HFStreamingConfig(name=name, split=split, **config), rngs=rngs)
    if streaming is True or _STREAM_ONLY & set(config):
        return stream
    if any(isinstance(s, TextSpec) for s in stream.element_spec().values()):
        return stream
    size = _split_bytes(stream.config, stream._dataset)
    if size is None or size > EAGER_MAX_BYTES:
        return stream
    return HFEagerSource(HFEagerConfig(name=name, split=split, **config), rngs=rngs)


def _split_bytes(config: _HFConfig, dataset: Any) -> int | None:
    """Declared bytes of the split, else the bytes of its local files (None: unknown)."""
    info = getattr(dataset, "info", None)
    splits = getattr(info, "splits", None) or {}
    total = 0
    for base in _split_names(config.split):
        if base in splits and splits[base].num_bytes:
            total += int(splits[base].num_bytes)
        else:
            total = -1
            break
    if total >= 0:
        return total
    paths: list[str] = []
    if config.data_files is not None:
        files = [config.data_files] if isinstance(config.data_files, str) else list(config.data_files)
        for f in files:
            paths.extend(glob.glob(f))
    elif config.name is not None and os.path.exists(config.name):
        if os.path.isfile(config.name):
            paths.append(config.name)
        else:
            for root, _, names in os.walk(config.name):
                paths.extend(os.path.join(root, n) for n in names)
    elif config.name is not None and glob.has_magic(config.name):
        paths.extend(glob.glob(config.name))
    if not paths:
        return None
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))

