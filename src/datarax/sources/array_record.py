"""``ArrayRecordSourceModule``: records of ArrayRecord files, read on host threads.

Built on array_record's ``ArrayRecordReader`` (one per file, batched reads:
:class:`~datarax.sources.array_record_files.ArrayRecordFiles`; the files named by
:func:`~datarax.sources.array_record_paths.resolve_paths`, counted by
:mod:`~datarax.sources.array_record_counts`) and the shared
:class:`~datarax.sources.host_reader.HostReader` (reader threads, bounded read-ahead,
O(1) position state). Record order is file order, or with
``shuffle_files=True`` the Feistel permutation of ``grain.experimental.index_shuffle``
keyed by ``seed + epoch``, computed per batch and never materialised.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_bool, check_int, check_seed
from datarax.core.errors import ConfigError, RecordError
from datarax.core.position import refuse_pipeline_state, saved_count
from datarax.dataset.metadata import DatasetInfo, find_dataset
from datarax.dataset.reading import DatasetDecoder, dataset_files, remote_dataset
from datarax.sources.array_record_remote import (
    check_block_bytes,
    check_cache_for_processes,
    local_blocks,
    older_block_setting,
    ranged_chunk,
    remote_reading,
    window_chunk,
)
from datarax.sources.array_record_counts import check_counts, count_records, remote_counts
from datarax.sources.array_record_files import ArrayRecordFiles, array_record_reader
from datarax.sources.array_record_paths import PathsLike, is_folder, resolve_paths
from datarax.sources.array_record_state import check_files, check_shuffled, files_digest
from datarax.sources.decoded_records import RecordStructureError, describe_cause
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.host_reader import HostReader
from datarax.sources.image_decoder import ImageDecoder, bind_to_dataset
from datarax.sources.random_access import BadRecordFields, RandomAccessSource
from datarax.sources.skip_ledger import record_place
from datarax.sources.source_call import (
    MISSING,
    check_config_and_data,
    config_keyword,
    source_config,
)
from datarax.storage import ShardCache, StorageStats, expand_user
from datarax.storage.head_start import UNBOUNDED, HeadStart
from datarax.storage.urls import all_remote


@dataclass(frozen=True)
class ArrayRecordSourceConfig(BadRecordFields, StructuralConfig):
    """Configuration of :class:`ArrayRecordSourceModule`.

    Attributes:
        seed: shuffle seed, an int in ``[0, 2**32)``; epoch ``e`` uses ``seed + e``.
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
        shuffle_files: serve records in a new global Feistel permutation each epoch
            (across all files) instead of file order.
        shuffle_window: with ``shuffle_files``, shuffle within windows of this many
            files instead (files in a new order each epoch, records shuffled within a
            window: :mod:`datarax.samplers.shard_window`), so a reader needs only a
            window's files at a time. None (default): one global permutation.
        shuffle_block: with ``shuffle_window``, windows of *blocks* of about this many
            bytes (``"8M"``, or an int; kept in bytes) instead of whole files: runs of a
            file's records cut at its chunks (:mod:`datarax.storage.blocks`), so a remote
            data set downloads a block at a time (the cache needs about two windows) and
            each host only its share's; the order is a function of ``(seed, epoch,
            footers, shuffle_block, shuffle_window)``. None (default): a block is a file.
        on_error: ``"raise"`` (default) stops at a record that cannot be read or
            decoded, naming file, record index and cause; ``"skip"`` drops it, counts
            it (``source.skipped_records()``, ``get_state()["skipped"]``) and goes on.
        max_skipped, max_skipped_fraction: with ``"skip"``, most records one epoch may
            skip, in all and as a fraction of its records (None: no limit).
        cast_float64: cast ``float64`` values ``decode`` returns to ``float32`` while
            ``jax_enable_x64`` is off (without it they are refused). 64-bit ints are
            narrowed to ``int32`` when they fit, refused naming the record when not;
            Python ``int``/``float`` take JAX's defaults (``int32``/``float32``).

    Example:
        >>> ArrayRecordSourceConfig(seed=42, num_epochs=10, shuffle_files=True).num_epochs
        10
    """

    seed: int = 42
    num_epochs: int = -1
    shuffle_files: bool = False
    shuffle_window: int | None = None
    shuffle_block: int | str | None = None
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None
    cast_float64: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed(self, "seed")
        check_bool(self, "shuffle_files")
        if self.shuffle_window is not None:
            check_int(self, "shuffle_window", minimum=1)
            if not self.shuffle_files:
                raise ConfigError(
                    f"{type(self).__name__}.shuffle_window={self.shuffle_window} shuffles "
                    "within windows of files and needs shuffle_files=True; set it, or drop "
                    "shuffle_window for file order."
                )
        if self.shuffle_block is not None:
            check_block_bytes(self)
        check_bool(self, "cast_float64")
        self.error_policy()



def _decode_one(decode_batch: Callable[[list[bytes]], Mapping[str, Any]], record: bytes) -> dict[str, Any]:
    """One record through ``decode_batch`` (learning the structure, naming a bad record)."""
    columns = decode_batch([record])
    if not isinstance(columns, Mapping):
        raise RecordStructureError(
            f"decode_batch returned {type(columns).__name__}, expected a dict of arrays with "
            "one row per record (e.g. {'image': np.frombuffer(b''.join(records), "
            "np.uint8).reshape(-1, 32, 32, 3)})")
    for key, value in columns.items():
        if np.ndim(value) == 0 or len(value) != 1:
            rows = "a scalar" if np.ndim(value) == 0 else f"{len(value)} rows"
            raise RecordStructureError(
                f"decode_batch returned field '{key}' as {rows} for 1 record; return each "
                "field stacked, one row per record (axis 0)")
    return {key: value[0] for key, value in columns.items()}


def default_decode(record: bytes) -> dict[str, np.ndarray]:
    """The record's bytes as a ``uint8`` vector under ``"record"``."""
    return {"record": np.frombuffer(record, dtype=np.uint8)}


#: the calls ArrayRecordSourceModule accepts, named when its arguments are mixed up
_CALL_FORMS = ("ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths), "
               "ArrayRecordSourceModule(config=ArrayRecordSourceConfig(), paths=paths) or "
               "ArrayRecordSourceModule(paths=paths, shuffle_files=...) (settings as keywords)")


class ArrayRecordSourceModule(RandomAccessSource):
    """Records of one or more ArrayRecord files, decoded and batched on host threads.

    Args:
        config: an :class:`ArrayRecordSourceConfig`.
        paths: one file, a glob pattern (expanded and sorted), or a list of files
            and/or patterns; records are numbered across files in that order. A dataset
            folder written by :func:`datarax.dataset.write_dataset` (or a glob / list of
            its shards) needs no ``decode``: its metadata gives the fields
            (:attr:`dataset_info`); given ``decode``, its shards are read in the
            metadata's order. Any of these may be a URL (any fsspec protocol; ``pip
            install "datarax[remote]"``), fetched into a local shard cache
            (:mod:`datarax.storage`).
        decode: ``bytes -> dict`` of arrays for one record (a flat dict); every record
            must decode to the fields, shapes and dtypes of the first (else a
            ``RecordError``). Default: the raw bytes as a ``uint8`` vector under
            ``"record"``. For images of varying size: :func:`datarax.decode_images`.
        decode_batch: optional ``list of bytes -> dict`` of arrays with one row per
            record (``decode``'s arrays, stacked), for fixed-layout records, e.g.
            ``np.frombuffer(b"".join(raw), np.uint8).reshape(-1, 32, 32, 3)``. One call
            a chunk; a chunk that does not match the first record, or whose call raises,
            is decoded record by record (so a bad record is named). Without ``decode``,
            one record is decoded as a batch of one.
        rngs: ``nnx.Rngs`` (unused by reading; kept for the module contract).
        name: module name for metadata and messages.
        num_threads: reader/decoder threads (array_record releases the GIL).
        read_ahead: batches the reader threads read and decode ahead of the consumer,
            rounded up to whole chunks, at least one a thread (docs/sources/array_record.md,
            "Reading ahead"); default ``2 * num_threads``.
        decode_processes: worker processes that run ``decode`` / ``decode_batch`` on
            the chunks the threads read, for a Python decode that holds the interpreter
            lock (default 0: the threads decode). They start on the first batch and end
            at :meth:`close` (:mod:`datarax.sources.decode_processes`).
        cache: for remote ``paths``, the :class:`~datarax.storage.ShardCache` (folder and
            size limit; default ``DATARAX_CACHE_DIR`` / ``DATARAX_CACHE_BYTES``).
        storage_options: for remote ``paths``, options of the fsspec filesystem
            (credentials, endpoint); by default each filesystem reads its own
            (``AWS_*`` variables for S3, ``AWS_ENDPOINT_URL`` included).
        ranged_reads: for remote ``paths``, read each record by byte range instead of
            downloading files (a global shuffle of a data set larger than the cache, or
            hosts reading only their share): about a request per record read. Refused
            with ``shuffle_block`` or ``decode_processes``; local paths ignore it.

    A record's stable index is its number across all files; ``get_state()`` is a few
    hundred bytes whatever the data size.

    Example:
        >>> import numpy as np, tempfile, os
        >>> from array_record.python.array_record_module import ArrayRecordWriter
        >>> path = os.path.join(tempfile.mkdtemp(), "data.array_record")
        >>> w = ArrayRecordWriter(path, "group_size:1")
        >>> for i in range(5): w.write(np.float32([i, i]).tobytes())
        >>> w.close()
        >>> src = ArrayRecordSourceModule(
        ...     ArrayRecordSourceConfig(num_epochs=1), path,
        ...     decode=lambda r: {"data": np.frombuffer(r, np.float32)})
        >>> [float(r["data"][0]) for r in src]
        [0.0, 1.0, 2.0, 3.0, 4.0]
        >>> src.close()
    """

    config: ArrayRecordSourceConfig  # pyright: ignore[reportIncompatibleVariableOverride]
    config_class = ArrayRecordSourceConfig

    def __init__(
        self,
        config: ArrayRecordSourceConfig = MISSING,
        /,
        paths: PathsLike = MISSING,
        *extra: Any,
        decode: Callable[[bytes], Mapping[str, Any]] | None = None,
        decode_batch: Callable[[list[bytes]], Mapping[str, np.ndarray]] | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        num_threads: int = 4,
        read_ahead: int | None = None,
        decode_processes: int = 0,
        cache: ShardCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        ranged_reads: bool = False,
        **settings: Any,
    ) -> None:
        config = config_keyword("ArrayRecordSourceModule", config, paths, extra, settings,
                                data_name="paths", forms=_CALL_FORMS)
        config = source_config(type(self), config, settings)
        check_config_and_data(
            "ArrayRecordSourceModule", config, ArrayRecordSourceConfig, paths, data_name="paths",
            call="ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths='data-*.array_record')")
        super().__init__(config, rngs=rngs, name=name, num_threads=num_threads, read_ahead=read_ahead)
        paths = expand_user(paths)  # '~/data' is the home folder's; URLs unchanged
        remote = None
        own_decode = decode is not None or decode_batch is not None
        listed = paths if isinstance(paths, (list, tuple)) else [paths]
        if all_remote(listed, "ArrayRecordSourceModule: paths"):  # s3://, ...: files cached
            storage_stats = StorageStats()  # counts the listing's retries and the downloads'
            objects, info = remote_dataset(paths, dataset=not own_decode or isinstance(
                                               decode, ImageDecoder), versions=ranged_reads,
                                           storage_options=storage_options, stats=storage_stats,
                                           where="ArrayRecordSourceModule")
            # whole files, or with shuffle_block blocks of them, read through the cache
            remote, blocks = remote_reading(objects, config, cache=cache, ranged=ranged_reads,
                                            storage_options=storage_options, stats=storage_stats)
            check_cache_for_processes(remote, decode_processes, ranged_reads)
            files = [o.url for o in objects]
            if info is not None and not own_decode:
                decoder = DatasetDecoder(info.features, cast_float64=config.cast_float64)
                decode, decode_batch = decoder.decode_one, decoder
            folder = None
        elif own_decode and not isinstance(decode, ImageDecoder):
            # a dataset folder still lists its shards; the user's decode reads them
            folder = find_dataset(paths) if is_folder(paths) else None
            info = None
        else:
            folder = find_dataset(paths)
            info = None
        if folder is not None:  # a datarax dataset: its metadata names the shards
            files, info = dataset_files(paths, folder)
            if not own_decode:  # ... and says how to decode them
                decoder = DatasetDecoder(info.features, cast_float64=config.cast_float64)
                decode, decode_batch = decoder.decode_one, decoder
        elif remote is None:
            files = resolve_paths(paths)
        # decode_images(...) reads the dataset's other fields from its metadata
        decode = bind_to_dataset(decode, info.features if info is not None else None)
        if remote is None:  # files are opened on first read: a later os.chdir must not move them
            files = [os.path.abspath(f) for f in files]
        self._dataset_info = nnx.static(info)
        self._remote = nnx.static(remote)
        array_record_reader()  # the optional extra, refused by name before any thread runs
        if remote is None:
            blocks = local_blocks(files, config)  # the order's blocks (files read whole)
            counts = count_records(files) if blocks is None else [
                f.num_records for f in blocks.footers]
            if info is not None:
                check_counts(files, counts, info)
        elif blocks is not None:
            counts = [f.num_records for f in blocks.footers]
        else:
            counts = remote_counts(remote)
        total = sum(counts)
        if total == 0:
            raise RecordError(f"ArrayRecordSourceModule: the files {files} hold no records; name "
                              "files that hold some (or write records into them).", path=files[0])
        self._files_digest = nnx.static(files_digest(files, counts))
        # remote files not cached yet: their first records by byte range, while they download
        head = None if remote is None else HeadStart(
            remote, hold=decode_processes == 0,
            **({"budget": UNBOUNDED, "request_bytes": 0, "max_requests": UNBOUNDED}
               if ranged_reads else {}),
            **({} if blocks is None else {"blocks": blocks, "files": objects}))
        self._ranged = ranged_reads and remote is not None
        self._blocks = nnx.static(blocks)
        self._data = nnx.static(ArrayRecordFiles(
            files, counts, remote, head, blocks=blocks if remote is not None else None))
        if decode is None and decode_batch is not None:  # one record: a batch of one
            decode = functools.partial(_decode_one, decode_batch)
        self._decode = nnx.static(decode if decode is not None else default_decode)
        self._use_reader(functools.partial(
            HostReader,
            self._data,
            self._decode,
            decode_batch=decode_batch,
            # not self.locate: the reader (its decode processes) would keep the source
            # alive in a cycle, ended only by the garbage collector
            locate=functools.partial(_locate, self._data.files, self._data.ends),
            num_threads=num_threads,
            read_ahead=read_ahead,
            max_chunk=ranged_chunk(remote, ranged_reads) or window_chunk(
                remote, blocks, config.shuffle_window),
            policy=config.error_policy(),
            name=type(self).__name__,
            cast_float64=config.cast_float64,
            decode_processes=decode_processes,
            read_next_epoch=remote is None,  # remote: each epoch's start plans its downloads
            learn_in_first_read=remote is not None,  # record 0 read with the first batch
        ))
        self._length = total

    def __len__(self) -> int:
        return self._length

    # ------------------------------------------------------------ description
    @property
    def dataset_info(self) -> DatasetInfo | None:
        """The metadata of the datarax dataset read (features, class names, shards), also
        when its folder is read with your ``decode``; None for plain files, or shards named
        by a glob or a list, read with ``decode``."""
        return self._dataset_info

    @property
    def paths(self) -> list[str]:
        """The files read, in record-numbering order."""
        return list(self._data.files)

    def locate(self, index: int) -> tuple[str, int]:
        """``(file, index_in_file)`` of stable record ``index``."""
        return _locate(self._data.files, self._data.ends, index)

    # ---------------------------------------------------------------- hooks
    def read_records(self, indices: Sequence[int]) -> list[bytes]:
        """Raw records at stable ``indices`` (one batched read per file touched); refused
        once the source is closed (a read would reopen files ``close()`` has closed)."""
        self._check_open()
        return self._data.__getitems__(indices)

    def decode(self, raw: bytes) -> Mapping[str, Any]:
        """One raw record through the ``decode`` this source was built with."""
        return self._decode(raw)

    def shuffle_seed(self) -> int | None:
        return self.config.seed if self.config.shuffle_files else None

    def _reword_error(self, err: RecordError) -> RecordError:
        """Raw records (no ``decode``) of different lengths: the file is fine, the
        records need a ``decode`` that gives them one shape."""
        cause = err.__cause__
        if self._decode is not default_decode or not isinstance(cause, RecordStructureError):
            return err
        return RecordError(
            f"ArrayRecordSourceModule: cannot batch {record_place(err.path, err.index or 0)}: "
            f"{describe_cause(cause)}. No decode= was given, so each record is served as "
            "its raw bytes (field 'record'), and records of different lengths cannot be "
            "stacked into a batch. The file is fine: pass decode= to turn a record's bytes "
            "into fields of one shape (or text), e.g. ArrayRecordSourceModule(config, paths, "
            "decode=lambda raw: {'text': raw.decode()}); images of several sizes: "
            "decode=datarax.decode_images(...).",
            path=err.path,
            index=err.index,
        )

    def epoch_order(self, epoch: int) -> EpochOrder:
        """Stable record index of every position of pass ``epoch`` in this shard
        (within windows of files with ``shuffle_window``)."""
        order = super().epoch_order(epoch)
        window = self.config.shuffle_window
        blocks = self._blocks
        if window is not None and order.seed is not None:
            counts = tuple(self._data.counts) if blocks is None else blocks.counts
            order = dataclasses.replace(order, shard_window=(counts, int(window)),
                                        block_bytes=None if blocks is None else blocks.block_bytes)
        if self._remote is not None and not self._ranged:  # read ahead the files (blocks)
            start = self.index if epoch == self.epoch else 0
            ends = self._data.ends if blocks is None else blocks.ends.tolist()
            if self._data.head is not None and not self.host_reader.active:
                self._data.head.arm()  # a pass starts (or resumes): ranged reads until cached
            self._remote.plan(order.indices, start, order.size, ends)  # (after them)
        return order

    def stats(self) -> dict[str, Any] | None:
        """The reader's timers, and for remote files ``"storage"``
        (:meth:`datarax.storage.RemoteShards.stats` and
        :meth:`datarax.storage.head_start.HeadStart.stats`)."""
        out = super().stats()
        if self._remote is None:
            return out
        head = self._data.head.stats() if self._data.head is not None else {}
        return {**(out or {}), "storage": {**self._remote.stats(), **head}}

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Position as a small JSON-able dict: :meth:`RandomAccessSource.get_state`'s,
        plus ``shuffled_indices`` (``{"seed", "epoch", "n"}`` regenerating the epoch's
        order; None without ``shuffle_files``) and ``files``, a digest of the files'
        names and record counts (:mod:`~datarax.sources.array_record_state`).
        """
        state = super().get_state()
        state["shuffled_indices"] = self.epoch_order(self.epoch).describe()
        state["files"] = self._files_digest
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out."""
        where = type(self).__name__
        refuse_pipeline_state(state, where)  # a pipeline's state: named, not a shuffle mismatch
        state = older_block_setting(state)
        if "shuffled_indices" in state:  # a bare {"current_index", "current_epoch"}: as is
            epoch = saved_count(state, "current_epoch", where, default=0)
            check_shuffled(state, self.epoch_order(epoch).describe(),
                           self.config.shuffle_files, where)
        check_files(state, self._files_digest, self._data.files, where)
        super().set_state(state)

    def order_settings(self) -> dict[str, Any]:
        """The config's settings and ``files``, the digest of the files' names and record
        counts in order: a position restored by any route (``set_state``, ``nnx.update``,
        or as a child of a ``ConcatSource``, ``MixSource``, ...) names the same records."""
        return {**super().order_settings(), "files": self._files_digest}

    # ------------------------------------------------------------- closing
    def close(self) -> None:
        """Stop the reader threads and close the files.

        Never raises a reader's error: a file deleted or truncated while open made its
        reads raise a :class:`~datarax.core.errors.RecordError` naming it, and under
        ``with source:`` that error is the one that propagates.
        """
        if self._closed:
            return
        self._closed = True
        self._data.stop()  # the reader threads' downloads end before they are waited for
        try:
            super().close()
        finally:
            self._data.close()


def _locate(files: Sequence[str], ends: Sequence[int], index: int) -> tuple[str, int]:
    """``(file, index_in_file)`` of stable record ``index`` over files ending at ``ends``."""
    f = bisect.bisect_right(ends, int(index))
    start = ends[f - 1] if f > 0 else 0
    return files[f], int(index) - start
