"""``ChunkReads``: one batched read of consecutive epoch positions, decoded and stacked.

The unit of work of :class:`~datarax.sources.host_reader.HostReader`'s reader threads.
:meth:`ChunkReads.read` maps positions ``[start, stop)`` of an epoch order to stable
record indices, fetches the raw records with one ``data.__getitems__`` call (record by
record where that fails, to find the failing ones), decodes each (or the whole chunk
with ``decode_batch``), checks it against the first record's structure and stacks the
fields. A record that cannot be read or decoded becomes a :class:`Failure` with its
position, stable index and cause; the reader's bad-record policy decides what happens
to it. Under ``on_error="raise"`` decoding stops at the first failure.

Example:
    >>> from datarax.sources.epoch_order import EpochOrder
    >>> from datarax.sources.error_policy import ErrorPolicy
    >>> records = DecodedRecords(lambda raw: {"x": np.int32(raw)})
    >>> spec = records.learn(0, 0)  # the first record sets the structure
    >>> chunk = ChunkReads(list(range(10)), records, None, ErrorPolicy()).read(
    ...     EpochOrder(length=10, seed=None, epoch=0), 2, 6)
    >>> chunk.columns["x"].tolist(), chunk.positions.tolist(), chunk.failures
    ([2, 3, 4, 5], [2, 3, 4, 5], [])
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

# no JAX or Flax below: decode worker processes load this module
from datarax.errors import ConfigError, RecordError, SourceChangedError
from datarax.sources.decoded_records import DecodedRecords, KeyedRecord, keyed, stack_values
from datarax.sources.error_policy import ErrorPolicy
from datarax.sources.open_readers import TooManyOpenFiles
from datarax.storage.errors import CacheFullError, RemoteStoreError

if TYPE_CHECKING:
    from datarax.sources.epoch_order import EpochOrder

# failures of this machine, the store, the install (a missing package) or a file written
# over while read, not of a record: they stop the read under every on_error policy
NOT_A_RECORD: tuple[type[Exception], ...] = (
    CacheFullError, RemoteStoreError, ImportError, SourceChangedError, TooManyOpenFiles)

#: a batched read covers about this many bytes of decoded records, in whole batches
CHUNK_BYTES = 16 << 20
MAX_CHUNK_BATCHES = 16


def chunk_positions(batch_size: int, spec: Mapping[str, Any] | None,
                    max_chunk: int | None = None) -> int:
    """Positions per batched read for batches of ``batch_size`` records of ``spec``:
    whole batches (so a batch is a view of one chunk) of about ``CHUNK_BYTES``, at most
    ``MAX_CHUNK_BATCHES``: each batched read costs a fixed amount besides its records,
    so fewer, larger reads win until a chunk outgrows the caches (docs/benchmarks.md);
    64 for batches under 64. With ``max_chunk``, at most that many (whole batches).

    >>> chunk_positions(256, {"x": np.zeros((32, 32, 3), np.uint8)})  # 768 KiB a batch
    4096
    >>> chunk_positions(256, {"x": np.zeros((32, 32, 3), np.uint8)}, max_chunk=1000)
    768
    """
    if max_chunk is not None:
        size = chunk_positions(batch_size, spec)
        return max(batch_size, min(size, max_chunk // batch_size * batch_size))
    if batch_size < 64:
        return 64
    record = sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize
                 for s in (spec or {}).values() if hasattr(s, "shape") and hasattr(s, "dtype"))
    batches = CHUNK_BYTES // max(record * batch_size, 1)
    return batch_size * int(min(max(batches, 1), MAX_CHUNK_BATCHES))


@dataclasses.dataclass
class Failure:
    position: int
    index: int
    cause: BaseException


@dataclasses.dataclass
class Chunk:
    """Decoded records of positions ``[start, stop)``, bad ones left out."""

    columns: dict[str, np.ndarray]
    indices: np.ndarray
    positions: np.ndarray
    stop: int
    failures: list[Failure]
    offset: int = 0  # records of this chunk already handed out

    @property
    def remaining(self) -> int:
        return int(self.indices.shape[0]) - self.offset

    def before(self, position: int) -> Chunk:
        """The records of this chunk at positions below ``position``."""
        keep = int(np.searchsorted(self.positions, position))
        if keep == self.positions.shape[0]:
            return self
        columns = {key: value[:keep] for key, value in self.columns.items()}
        return dataclasses.replace(self, columns=columns, indices=self.indices[:keep],
                                   positions=self.positions[:keep], stop=int(position),
                                   failures=[f for f in self.failures if f.position < position])


class ChunkReads:
    """Reads chunks of ``data`` (``len``, ``[i]``, ideally ``__getitems__``) through
    ``records`` (the decoder that learns the first readable record's structure,
    :meth:`learn_first`); with ``processes``
    (:class:`~datarax.sources.decode_processes.DecodeProcesses`) each chunk is read by
    a worker process."""

    def __init__(
        self,
        data: Any,
        records: DecodedRecords,
        decode_batch: Callable[[list[Any]], Mapping[str, Any]] | None,
        policy: ErrorPolicy,
        processes: Any = None,  # a DecodeProcesses (which imports this module)
    ) -> None:
        self.data = data
        self.records = records
        self.decode_batch = decode_batch
        self.policy = policy
        self.processes = processes
        self._getitems = getattr(data, "__getitems__", None)
        # a decode that decides per record (a random crop) gets each record's key
        self.keyed = keyed(records.decode)
        self._learning = threading.RLock()  # the structure is learned once

    def learn_first(
        self, name: str, where: Callable[[int], str],
        error: Callable[[int, BaseException], RecordError],
    ) -> None:
        """Learn the structure from the first record that reads and decodes, trying as
        many as the skip budget allows (one under ``on_error="raise"``); ``error(index,
        cause)`` is a bad record's error, ``where(index)`` names a record whose decode a
        setting refuses (``cast_float64``). The worker processes, if any, start then.
        Nothing is read where the structure is known already."""
        with self._learning:
            if self.records.fields is None:
                self._learn_first(name, where, error)

    def _learn_first(
        self, name: str, where: Callable[[int], str],
        error: Callable[[int, BaseException], RecordError],
    ) -> None:
        n = len(self.data)
        if n == 0:
            raise RecordError(f"{name} holds no records.")
        limit = 1 if not self.policy.skips else n
        budget = self.policy.budget(n)
        if budget is not None:
            limit = min(n, budget + 1)
        first_error: RecordError | None = None
        for index in range(limit):
            try:
                raw = self.data[index]
                self.records.learn(KeyedRecord(raw, index, 0) if self.keyed else raw, index)
            except NOT_A_RECORD:
                raise
            except ConfigError as err:  # a setting (cast_float64), not a bad record
                raise ConfigError(
                    f"{name}: decoding {where(index)}: {str(err).rstrip('.')}."
                ) from err
            except Exception as err:  # noqa: BLE001 - reported with location
                if first_error is None:
                    first_error = error(index, err)
                continue
            break
        else:
            assert first_error is not None
            if limit > 1:
                raise RecordError(
                    f"{name}: none of the first {limit} records could be read and "
                    "decoded, so the fields are unknown. The first failure: "
                    f"{first_error.args[0]}",
                    path=first_error.path,
                    index=first_error.index,
                ) from first_error
            raise first_error
        if self.processes is not None:  # they start while the caller goes on
            self.processes.start(self)

    def read_learning(
        self, order: EpochOrder, start: int, stop: int, name: str,
        where: Callable[[int], str], error: Callable[[int, BaseException], RecordError],
    ) -> Chunk:
        """:meth:`read` of a session's first chunk before the structure is learned: record
        0 (the one :meth:`learn_first` tries first) fetched in the chunk's own batched read
        — for remote files no round trip of its own — learned, then the chunk decoded.
        Where that read or record 0's decode fails, :meth:`learn_first` (its errors, e.g.
        a record 0 that cannot be read, naming its file) and then :meth:`read`."""
        indices = order.indices(start, stop)
        fetched = None
        with self._learning:
            if self.records.fields is None and self._getitems is not None \
                    and self.processes is None:
                first = np.flatnonzero(indices == 0)
                keys = indices if first.size else np.concatenate([[0], indices])
                try:
                    raw = list(self._getitems(keys.tolist()))
                    record = raw[int(first[0])] if first.size else raw.pop(0)
                    self.records.learn(KeyedRecord(record, 0, 0) if self.keyed else record, 0)
                    fetched = raw
                except NOT_A_RECORD:
                    raise
                except Exception:  # noqa: BLE001 - learn_first reads it again, for its error
                    fetched = None
            self.learn_first(name, where, error)  # reads nothing once learned
        if fetched is None:
            return self.read(order, start, stop)
        return self.read_indices(indices, order.epoch, start, fetched)

    def fetch(self, indices: np.ndarray) -> tuple[list[Any], dict[int, BaseException]]:
        """Raw records for ``indices``; failing ones reported by slot."""
        keys = indices.tolist()
        if self._getitems is not None:
            try:
                return list(self._getitems(keys)), {}
            except NOT_A_RECORD:
                raise
            except Exception:  # noqa: BLE001 - narrow down to the failing record(s)
                pass
        records: list[Any] = []
        failures: dict[int, BaseException] = {}
        for slot, key in enumerate(keys):
            try:
                records.append(self.data[key])
            except NOT_A_RECORD:
                raise
            except Exception as err:  # noqa: BLE001
                records.append(None)
                failures[slot] = err
        return records, failures

    def read(self, order: EpochOrder, start: int, stop: int) -> Chunk:
        """Positions ``[start, stop)`` of ``order``: fetched, decoded, checked, stacked
        (by a worker process, with ``processes``)."""
        if self.processes is not None:
            return self.processes.read(self, order, start, stop)
        return self.read_indices(order.indices(start, stop), order.epoch, start)

    def read_indices(self, indices: np.ndarray, epoch: int, start: int,
                     fetched: list[Any] | None = None) -> Chunk:
        """The records of stable indices ``indices`` (epoch positions ``start, start + 1,
        ...`` of pass ``epoch``): fetched (unless ``fetched`` holds them), decoded,
        checked, stacked here (what a decode worker runs; the epoch order stays in the
        source's process)."""
        stop = start + int(indices.shape[0])
        raw, fetch_failures = (fetched, {}) if fetched is not None else self.fetch(indices)
        spec = self.records.fields
        assert spec is not None
        if self.keyed:
            raw = [KeyedRecord(r, i, epoch) for r, i in zip(raw, indices.tolist())]
        elif self.decode_batch is not None and not fetch_failures:
            columns = self.records.check_batch(raw, self.decode_batch)
            if columns is not None:  # the whole chunk at once; else record by record
                return Chunk(columns, indices, np.arange(start, stop, dtype=np.int64), stop, [])
        decoded_all = None
        if not fetch_failures:  # the whole chunk at once, checked field by field
            columns, decoded_all = self.records.decode_all(raw)
            if columns is not None:
                return Chunk(columns, indices, np.arange(start, stop, dtype=np.int64), stop, [])
        keep: list[int] = []
        decoded: list[Mapping[str, Any]] = []
        failures: list[Failure] = []
        stop_early = not self.policy.skips
        for slot, record in enumerate(raw):
            cause = fetch_failures.get(slot)
            if cause is None:
                try:
                    decoded.append(self.records.check(record) if decoded_all is None
                                   else self.records.check_decoded(decoded_all[slot]))
                    keep.append(slot)
                    continue
                except Exception as err:  # noqa: BLE001
                    cause = err
            failures.append(Failure(start + slot, int(indices[slot]), cause))
            if stop_early:
                break
        columns = {key: stack_values([r[key] for r in decoded]) for key in spec} if decoded else {}
        if len(keep) == len(raw):
            kept_indices = indices
            positions = np.arange(start, stop, dtype=np.int64)
        else:
            kept = np.asarray(keep, dtype=np.int64)
            kept_indices = indices[kept]
            positions = kept + start
        return Chunk(columns, kept_indices, positions, stop, failures)

    def close(self) -> None:
        """End the worker processes, if any."""
        if self.processes is not None:
            self.processes.close()
