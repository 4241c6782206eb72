"""TensorFlow Datasets sources: eager (device arrays) and streaming (host random access).

Both read a split through ``tfds.data_source`` — TFDS's random-access path over
ArrayRecord files, which needs no TensorFlow:

* :class:`TFDSEagerSource` reads the whole split once (through the shared
  :class:`~datarax.sources.host_reader.HostReader`) into device arrays and is an
  *indexed* source (the compiled path): a :class:`~datarax.sources.MemorySource`
  filled from the split, with its Feistel shuffle (``seed + epoch``), stable indices
  and ``{"current_index", "current_epoch"}`` state. Text fields are refused (drop them
  with ``exclude_keys``, or stream). A split prepared only as TFRecord is read through
  TensorFlow when it is installed.
* :class:`TFDSStreamingSource` keeps the split on disk and reads batches on host
  threads with :class:`~datarax.sources.host_reader.HostReader` (bounded read-ahead):
  global shuffle by the Feistel permutation (O(1) memory, ``seed + epoch``), this
  process's shard of every epoch, text fields as lists of ``str``, exact resume from a
  tiny state, and ArrayRecordSourceModule's bad-record policy (``on_error="skip"`` with a
  per-epoch skip budget).

``data_dir`` is where TFDS keeps prepared datasets (default: ``$TFDS_DATA_DIR`` or
``~/tensorflow_datasets``). With ``download=True`` (default) a dataset that is not
there yet is downloaded and prepared as ArrayRecord; ``download=False`` only reads.
A dataset already prepared only as TFRecord has no random access: the error says how
to re-prepare or convert it (and that TensorFlow is needed to read TFRecord).

Fields: nested feature dicts are flattened with ``/`` (``"objects/bbox"``); ``Text``
features are decoded to ``str``. 64-bit fields follow :mod:`datarax.sources._columns`
(int64 labels become int32 when every value fits, float64 refused unless
``cast_float64=True``) while ``jax_enable_x64`` is off.

Needs the ``tfds`` extra: ``pip install "datarax[tfds]"``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_bool, check_int
from datarax.core.data_source import Batch
from datarax.core.errors import ConfigError, DataraxError, RecordError
from datarax.core.spec import TextSpec, x64_enabled
from datarax.sources._columns import (
    fit_64bit,
    refuse_text,
    select_keys,
)
from datarax.sources._dataset_config import check_dataset_fields, empty_split
from datarax.sources._optional import require
from datarax.sources.host_reader import EpochOrder, HostReader
from datarax.sources.memory import MemorySource
from datarax.sources.random_access import BadRecordFields, RandomAccessHostSource

#: ``from_tfds`` picks the eager source for splits declared at most this many bytes.
EAGER_MAX_BYTES = 256 * 2**20


# ---------------------------------------------------------------------- configs
@dataclass(frozen=True)
class _TFDSConfig(StructuralConfig):
    name: str = ""
    split: str = "train"
    data_dir: str | None = None
    download: bool = True
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
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(
                f"{cls}.name must name a TFDS dataset (e.g. 'mnist'), got {self.name!r}."
            )
        check_dataset_fields(self)
        check_bool(self, "download")


@dataclass(frozen=True)
class TFDSEagerConfig(_TFDSConfig):
    """Configuration of :class:`TFDSEagerSource`.

    Attributes:
        name: TFDS dataset name (``"mnist"``, ``"cifar10/config:1.0.0"``).
        split: split with optional TFDS slicing, e.g. ``"train[:80%]"``.
        data_dir: folder of prepared TFDS datasets (default: TFDS's own default).
        download: download and prepare (as ArrayRecord) when missing; False: read only.
        include_keys / exclude_keys: fields to keep / drop (unknown names are refused).
        shuffle, seed: Feistel permutation per epoch (``seed + epoch``), O(1) memory.
        cast_float64: cast float64 fields to float32 while x64 is off (else refused).
        track_metadata, num_epochs: as in :class:`~datarax.sources.MemorySourceConfig`.
    """


@dataclass(frozen=True)
class TFDSStreamingConfig(BadRecordFields, _TFDSConfig):
    """Configuration of :class:`TFDSStreamingSource` (fields of :class:`TFDSEagerConfig`, plus).

    Attributes:
        num_threads: host threads reading and decoding records.
        read_ahead: chunks read ahead of the consumer (None: ``2 * num_threads``);
            with the chunk size (the batch size, at least 64) it bounds memory.
        on_error: ``"raise"`` (default) stops at a record that cannot be read or
            decoded, naming split, record index and cause; ``"skip"`` drops it, counts
            it (``source.skipped_records()``, ``get_state()["skipped"]``) and goes on.
        max_skipped: with ``"skip"``, most records one epoch may skip (None: no limit).
        max_skipped_fraction: with ``"skip"``, most records one epoch may skip as a
            fraction of its records (None: no limit).
    """

    num_threads: int = 4
    read_ahead: int | None = None
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_threads", minimum=1)
        if self.read_ahead is not None:
            check_int(self, "read_ahead", minimum=1)
        self.error_policy()


# ---------------------------------------------------------------------- opening
def _tfds(where: str) -> Any:
    return require("tensorflow_datasets", extra="tfds", user=where)


def _tensorflow_installed() -> bool:
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


class _TFRecordOnly(Exception):
    """The split exists only as TFRecord files (no random access)."""


def _builder(tfds: Any, config: _TFDSConfig, where: str) -> Any:
    try:
        return tfds.builder(config.name, data_dir=config.data_dir)
    except tfds.core.registered.DatasetNotFoundError as err:
        raise _unknown_name(config, where) from err


def _unknown_name(config: _TFDSConfig, where: str) -> DataraxError:
    place = f" or in data_dir={config.data_dir!r}" if config.data_dir else ""
    return DataraxError(
        f"{where}: TFDS has no dataset named {config.name!r} (not in its catalog{place}). "
        "Check the spelling (see tfds.list_builders()), or pass data_dir= pointing at the "
        "folder holding the prepared dataset."
    )


def _open_data_source(config: _TFDSConfig, where: str) -> tuple[Any, Any]:
    """``(random-access data source, DatasetInfo)`` of the configured split."""
    tfds = _tfds(where)
    kwargs: dict[str, Any] = {
        "split": config.split,
        "data_dir": config.data_dir,
        "download": config.download,
    }
    if config.download:
        kwargs["download_and_prepare_kwargs"] = {"file_format": "array_record"}
    try:
        source = tfds.data_source(config.name, **kwargs)
    except tfds.core.registered.DatasetNotFoundError as err:
        raise _unknown_name(config, where) from err
    except NotImplementedError as err:
        raise _TFRecordOnly(str(err)) from err
    except (ValueError, KeyError) as err:
        if "split" in str(err).lower():
            raise _unknown_split(tfds, config, where) from err
        if _split_is_empty(tfds, config, where):
            raise empty_split(config, where) from err
        raise
    except AssertionError as err:  # TFDS asserts on data missing with download=False
        raise DataraxError(
            f"{where}: dataset {config.name!r} is not prepared in data_dir="
            f"{config.data_dir!r} and download=False: {err}"
        ) from err
    return source, _builder(tfds, config, where).info


def _split_is_empty(tfds: Any, config: _TFDSConfig, where: str) -> bool:
    try:
        return int(_builder(tfds, config, where).info.splits[config.split].num_examples) == 0
    except Exception:
        return False


def _unknown_split(tfds: Any, config: _TFDSConfig, where: str) -> DataraxError:
    info = _builder(tfds, config, where).info
    names = sorted(str(s) for s in info.splits.keys())
    return DataraxError(
        f"{where}: split {config.split!r} is not in dataset {config.name!r}; its splits "
        f"are {names}."
    )


def _tfrecord_message(config: _TFDSConfig, where: str, *, eager: bool) -> str:
    convert = (
        f"convert it to ArrayRecord, which datarax reads without TensorFlow (`tfds "
        f"convert_format --dataset_dir=<data_dir>/{config.name}/<version> "
        "--out_file_format=array_record`), or prepare it afresh with "
        f"tfds.builder({config.name!r}).download_and_prepare(file_format='array_record')"
    )
    if not _tensorflow_installed():
        return (
            f"{where}: dataset {config.name!r} is prepared only as TFRecord, which has no "
            "random access and needs TensorFlow to read, and TensorFlow is not installed. "
            f"Either {convert}, or install TensorFlow (pip install tensorflow)"
            + (" so TFDSEagerSource can read TFRecord." if eager else " and use TFDSEagerSource.")
        )
    return (
        f"{where}: dataset {config.name!r} is prepared only as TFRecord, which has no "
        f"random access. Either {convert}, or use TFDSEagerSource, which reads TFRecord "
        "through TensorFlow."
    )


# ------------------------------------------------------------------ decoding
class _Decoder:
    """Turns one TFDS example (nested dict) into a flat dict of kept, policy-cast fields."""

    def __init__(self, info: Any, config: _TFDSConfig, where: str) -> None:
        self.where = where
        self.cast_float64 = config.cast_float64
        self.dtypes: dict[str, np.dtype] = {}
        self.text: set[str] = set()
        infos = _flatten(info.features.get_tensor_info())
        for key, tensor_info in infos.items():
            dtype = _np_dtype(getattr(tensor_info, "np_dtype", None) or tensor_info.dtype)
            if dtype.kind in "OSU":
                self.text.add(key)
            else:
                self.dtypes[key] = dtype
        self.keys = select_keys(list(infos), config.include_keys, config.exclude_keys, where=where)
        for key in self.keys:
            dtype = self.dtypes.get(key)
            if dtype is not None and dtype.kind == "f" and dtype.itemsize == 8:
                # refuse float64 up front (never narrowed unless cast_float64=True)
                fit_64bit(key, np.zeros(1, dtype), where=where, cast_float64=config.cast_float64)

    def __call__(self, example: Mapping[str, Any]) -> dict[str, Any]:
        flat = _flatten(example)
        out: dict[str, Any] = {}
        for key in self.keys:
            value = flat[key]
            if key in self.text:
                out[key] = _text(value)
                continue
            array = np.asarray(value, dtype=self.dtypes.get(key))
            out[key] = self._fit(key, array)
        return out

    def _fit(self, key: str, array: np.ndarray) -> np.ndarray:
        """The 64-bit policy for one record (the reader names the record on error)."""
        if x64_enabled() or array.dtype.itemsize != 8 or array.dtype.kind not in "iuf":
            return array
        if array.dtype.kind == "f":
            return array.astype(np.float32)  # cast_float64 was checked at construction
        info = np.iinfo(np.int32)
        if array.size and (array.max() > info.max or array.min() < info.min):
            bad = array.max() if array.max() > info.max else array.min()
            raise ValueError(
                f"field '{key}' is {array.dtype.name} and holds {int(bad)}, outside the "
                "int32 range, so it cannot be cast to int32 without loss while "
                "jax_enable_x64 is off. Enable x64 with jax.config.update('jax_enable_x64', "
                "True), or drop the field (exclude_keys)"
            )
        return array.astype(np.int32)

    def declared_spec(self) -> dict[str, Any]:
        """What the decoded records carry, from the dataset's feature declaration."""
        return {k: TextSpec(()) for k in self.keys if k in self.text}


def _np_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(getattr(dtype, "as_numpy_dtype", object))


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS":
        return np.array([_text(v) for v in value.ravel()], dtype=object).reshape(value.shape)
    return value


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def _record_error(err: RecordError, config: _TFDSConfig, where: str, hint: str = "") -> RecordError:
    """The reader's error, worded for a TFDS split (``hint``: what to do, if anything)."""
    cause = err.__cause__
    detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(err)
    return RecordError(
        f"{where}: cannot read record {err.index} of split {config.split!r} of dataset "
        f"{config.name!r}: {detail}.{hint}",
        path=err.path,
        index=err.index,
    )


_SKIP_HINT = (
    " To drop bad records instead, construct the source with on_error='skip' (they are "
    "counted and reported)."
)


# ------------------------------------------------------------------- eager
class TFDSEagerSource(MemorySource):
    """A TFDS split loaded once into device arrays (indexed, compiled path).

    Serving is :class:`~datarax.sources.MemorySource`'s: Feistel shuffle keyed by
    ``seed + epoch``, ``record_indices_at`` (stable index = record of the split), ``len``,
    ``element_spec`` and ``{"current_index", "current_epoch"}`` state.

    Example:
        >>> from datarax.sources import TFDSEagerSource, TFDSEagerConfig
        >>> source = TFDSEagerSource(TFDSEagerConfig(name="mnist", split="train",  # doctest: +SKIP
        ...                                          shuffle=True, seed=42))
        >>> source.element_spec()["image"].shape  # doctest: +SKIP
        (28, 28, 1)
    """

    config: TFDSEagerConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: TFDSEagerConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        num_threads: int = 4,
    ) -> None:
        if not isinstance(config, TFDSEagerConfig):
            raise ConfigError(f"TFDSEagerSource needs a TFDSEagerConfig, got {type(config).__name__}.")
        where = "TFDSEagerSource"
        try:
            data, info = _open_data_source(config, where)
        except _TFRecordOnly:
            if not _tensorflow_installed():
                raise DataraxError(_tfrecord_message(config, where, eager=True)) from None
            columns = _load_with_tensorflow(config, where)
        else:
            columns = _load_all(data, info, config, where, num_threads)
        refuse_text(columns, where=where, streaming_hint="TFDSStreamingSource (from_tfds(..., streaming=True))")
        super().__init__(config, columns, rngs=rngs, name=name)  # type: ignore[arg-type]


def _load_all(data: Any, info: Any, config: _TFDSConfig, where: str, num_threads: int) -> dict[str, np.ndarray]:
    decoder = _Decoder(info, config, where)
    n = len(data)
    if n == 0:
        raise empty_split(config, where)
    reader = HostReader(data, decoder, num_threads=num_threads, chunk_size=min(n, 1024), name=where)
    try:
        reader.start(EpochOrder(length=n, seed=None, epoch=0))
        read = reader.next_batch(n)
    except RecordError as err:
        raise _record_error(err, config, where) from err.__cause__
    finally:
        reader.close()
    assert read is not None
    return {k: v for k, v in read.columns.items()}


def _load_with_tensorflow(config: _TFDSConfig, where: str) -> dict[str, np.ndarray]:
    """The whole split through TensorFlow (``tfds.load``; TFRecord-only datasets)."""
    tfds = _tfds(where)
    builder = _builder(tfds, config, where)
    try:
        dataset = builder.as_dataset(split=config.split, batch_size=-1)
    except (ValueError, KeyError) as err:
        if "split" in str(err).lower():
            raise _unknown_split(tfds, config, where) from err
        raise
    arrays = _flatten(tfds.as_numpy(dataset))
    decoder = _Decoder(builder.info, config, where)
    columns: dict[str, np.ndarray] = {}
    for key in decoder.keys:
        value = np.asarray(arrays[key])
        if key in decoder.text:
            columns[key] = _text(value.astype(object))
        else:
            columns[key] = fit_64bit(key, value, where=where, cast_float64=config.cast_float64)
    if not columns or len(next(iter(columns.values()))) == 0:
        raise empty_split(config, where)
    return columns


# --------------------------------------------------------------- streaming
class TFDSStreamingSource(RandomAccessHostSource):
    """A TFDS split read by index on host threads (``tfds.data_source``, no TensorFlow).

    Each ``for batch in pipeline`` is one pass (the Pipeline calls ``start_epoch``);
    with ``shuffle=True`` pass ``e`` follows the Feistel permutation keyed by
    ``seed + e`` (the same order :class:`TFDSEagerSource` serves). Memory is bounded by
    the reader's read-ahead. ``get_state()`` is ``{"current_index", "current_epoch",
    "skipped"}``; ``set_state`` continues exactly after the last record handed out.

    With ``on_error="skip"`` a record that cannot be read or decoded is dropped and
    counted (:meth:`skipped_records`; ``"skipped"``: skips this epoch before
    ``current_index``), so a restored source skips exactly the same records; more
    skips in one epoch than ``max_skipped`` / ``max_skipped_fraction`` allow raise
    :class:`~datarax.core.errors.RecordError`.

    Example:
        >>> from datarax.sources import TFDSStreamingSource, TFDSStreamingConfig
        >>> source = TFDSStreamingSource(TFDSStreamingConfig(name="mnist", split="test"))  # doctest: +SKIP
        >>> source.get_batch(4)["label"].shape  # doctest: +SKIP
        (4,)
    """

    config: TFDSStreamingConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: TFDSStreamingConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, TFDSStreamingConfig):
            raise ConfigError(
                f"TFDSStreamingSource needs a TFDSStreamingConfig, got {type(config).__name__}."
            )
        super().__init__(config, rngs=rngs, name=name)
        where = "TFDSStreamingSource"
        try:
            data, info = _open_data_source(config, where)
        except _TFRecordOnly:
            raise DataraxError(_tfrecord_message(config, where, eager=False)) from None
        length = len(data)
        if length == 0:
            raise empty_split(config, where)
        decoder = _Decoder(info, config, where)
        reader = HostReader(
            data,
            decoder,
            num_threads=config.num_threads,
            read_ahead=config.read_ahead,
            policy=config.error_policy(),
            name=where,
        )
        self._use_reader(reader, length)

    def _shuffle_seed(self) -> int | None:
        return self.config.seed if self.config.shuffle else None

    def _reword_error(self, err: RecordError) -> RecordError:
        where, config = "TFDSStreamingSource", self.config
        if err.__cause__ is None:  # the skip budget ran out; the reader's message says so
            message = str(err).removeprefix(f"{where}: ")
            return RecordError(
                f"{where}: split {config.split!r} of dataset {config.name!r}: {message}",
                path=err.path,
                index=err.index,
            )
        return _record_error(err, config, where, _SKIP_HINT)

    def _host_columns(self, columns: dict[str, Any]) -> Batch:
        return {k: (v.tolist() if v.dtype.kind in "OSU" else v) for k, v in columns.items()}


# ---------------------------------------------------------------- factory
_STREAM_ONLY = {"num_threads", "read_ahead", "on_error", "max_skipped", "max_skipped_fraction"}


def from_tfds(
    name: str,
    split: str = "train",
    *,
    streaming: bool | None = None,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> TFDSEagerSource | TFDSStreamingSource:
    """A TFDS source for ``name``/``split``: eager or streaming.

    ``streaming=True`` / ``False`` chooses explicitly and always wins. With
    ``streaming=None`` the split is loaded eagerly (:class:`TFDSEagerSource`) when the
    dataset declares its size at most :data:`EAGER_MAX_BYTES` (256 MiB) and none of the
    kept fields is text (and no streaming-only option — ``num_threads``, ``read_ahead``,
    ``on_error``, ``max_skipped``, ``max_skipped_fraction`` — is given); otherwise it is
    streamed (:class:`TFDSStreamingSource`).

    ``config`` holds further config fields (``data_dir``, ``shuffle``, ``seed``, ...).

    Example:
        >>> from datarax.sources import from_tfds
        >>> source = from_tfds("mnist", "train", shuffle=True, seed=42)  # doctest: +SKIP
    """
    if streaming not in (None, True, False):
        raise ConfigError(f"from_tfds streaming must be True, False or None, got {streaming!r}.")
    if streaming is False:
        if _STREAM_ONLY & set(config):
            raise ConfigError(
                f"from_tfds: {sorted(_STREAM_ONLY & set(config))} apply only to streaming "
                "(TFDSStreamingSource); drop them or pass streaming=True."
            )
        return TFDSEagerSource(TFDSEagerConfig(name=name, split=split, **config), rngs=rngs)
    if streaming is True or _STREAM_ONLY & set(config):
        return TFDSStreamingSource(TFDSStreamingConfig(name=name, split=split, **config), rngs=rngs)
    eager_config = TFDSEagerConfig(name=name, split=split, **config)
    where = "from_tfds"
    tfds = _tfds(where)
    info = _builder(tfds, eager_config, where).info
    decoder = _Decoder(info, eager_config, where)
    size = _declared_bytes(info, split)
    if decoder.declared_spec() or size is None or size > EAGER_MAX_BYTES:
        return TFDSStreamingSource(TFDSStreamingConfig(name=name, split=split, **config), rngs=rngs)
    return TFDSEagerSource(eager_config, rngs=rngs)


def _declared_bytes(info: Any, split: str) -> int | None:
    base = split.split("[")[0]
    try:
        split_info = info.splits[base]
        size = int(split_info.num_bytes)
    except Exception:  # unknown split / undeclared size: decide for streaming
        return None
    return size if size > 0 else None
