"""``HostReader``: the one threaded reader every random-access host source reuses.

A random-access host source (ArrayRecord files, a TFDS ``data_source``, ...) owns an
object ``data`` with ``len(data)`` and ``data[i]`` (and, better, the batched
``data.__getitems__(list_of_indices)``), plus a ``decode(raw) -> dict`` function.
``HostReader`` turns that into batches of numpy arrays:

* **order** — :class:`EpochOrder` maps an epoch *position* (``0 .. size-1`` inside
  this process's shard) to a *stable record index* (``0 .. length-1``): sequential, or
  the Feistel permutation of ``datarax.samplers.index_shuffle_np`` keyed by
  ``seed + epoch`` (bit-identical to ``grain.experimental.index_shuffle``), then the
  shard's contiguous block ``[lo, hi)``. Nothing of size ``length`` is ever built;
  :meth:`EpochOrder.describe` is a 3-int dict for a state.
* **reading ahead** — a pool of ``num_threads`` threads reads *chunks* of consecutive
  positions with one batched read each (``__getitems__``), decodes every record, checks
  it against the first record's structure and stacks the fields; at most
  ``read_ahead`` chunks are queued or ready at any time (bounded memory).
* **handing out** — :meth:`HostReader.next_batch` assembles exactly ``batch_size``
  records (fewer only at the end of the epoch) in epoch order and returns a
  :class:`ReadBatch`: ``columns`` (dict of stacked numpy arrays), ``indices`` (the
  stable index of each record, for per-record random keys) and ``end`` (epoch positions
  consumed so far — the only thing a state needs). Restarting with
  ``start(order, position=end, skipped=...)`` continues exactly after the last record
  handed out; read-ahead is discarded, never counted.
* **bad records** — :class:`ErrorPolicy`: ``on_error="raise"`` (default) raises
  :class:`~datarax.core.errors.RecordError` naming the file, the record index in that
  file (via the ``locate(stable_index) -> (path, index_in_file)`` callback) and the
  cause; ``on_error="skip"`` drops the record, counts it (``HostReader.skipped`` for
  this epoch, ``skipped_records()`` for the reports) and raises once the per-epoch
  budget (``max_skipped`` and/or ``max_skipped_fraction`` of the epoch) is exceeded.
  Skips are committed only when the handed-out position passes them, so a resumed
  reader (``start(..., skipped=state_count)``) skips exactly the same records and
  counts them once.
* **closing** — :meth:`HostReader.stop` ends the epoch session (pending reads are
  cancelled, the pool's threads joined); :meth:`HostReader.close` also marks the reader
  closed. No thread outlives either.

Example:
    >>> import numpy as np
    >>> data = [np.int32(i).tobytes() for i in range(10)]
    >>> reader = HostReader(data, lambda b: {"x": np.frombuffer(b, np.int32)[0]})
    >>> reader.start(EpochOrder(length=10, seed=None, epoch=0))
    >>> b = reader.next_batch(4); b.columns["x"].tolist(), b.indices.tolist(), b.end
    ([0, 1, 2, 3], [0, 1, 2, 3], 4)
    >>> reader.start(EpochOrder(length=10, seed=None, epoch=0), position=b.end)
    >>> reader.next_batch(100).columns["x"].tolist()
    [4, 5, 6, 7, 8, 9]
    >>> reader.next_batch(100) is None
    True
    >>> reader.close()
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from datarax.core.dtypes import fit_value
from datarax.core.errors import ConfigError, DataraxError, RecordError
from datarax.core.spec import TextSpec
from datarax.samplers.index_shuffle import index_shuffle_np, small_permutation, uses_small_table
from datarax.sources.skip_ledger import ErrorPolicy, SkipLedger, SkippedRecord

Decode = Callable[[Any], Mapping[str, Any]]
Locate = Callable[[int], tuple[str | None, int]]



# --------------------------------------------------------------------------- order
@dataclasses.dataclass(frozen=True)
class EpochOrder:
    """Which stable record each epoch position serves, in O(1) memory.

    Args:
        length: records in the whole data set (one unsharded epoch).
        seed: ``None`` for file order; else the base seed, epoch ``e`` shuffled with
            ``(seed + e) % 2**32``.
        epoch: the pass number.
        lo, hi: this shard's block ``[lo, hi)`` of the epoch's (shuffled) order
            (``hi=None``: ``length``).

    Example:
        >>> EpochOrder(length=5, seed=None, epoch=3, lo=1, hi=4).indices(0, 3).tolist()
        [1, 2, 3]
        >>> EpochOrder(length=5, seed=7, epoch=1).describe()
        {'seed': 7, 'epoch': 1, 'n': 5}
    """

    length: int
    seed: int | None
    epoch: int
    lo: int = 0
    hi: int | None = None

    @property
    def size(self) -> int:
        """Positions in this shard's part of the epoch."""
        hi = self.length if self.hi is None else self.hi
        return hi - self.lo

    def indices(self, start: int, stop: int) -> np.ndarray:
        """Stable record indices served at positions ``[start, stop)`` (int64)."""
        positions = np.arange(self.lo + start, self.lo + stop, dtype=np.int64)
        if self.seed is None or self.length <= 1:
            return positions
        seed = (int(self.seed) + int(self.epoch)) % 2**32
        if uses_small_table(self.length - 1):
            return small_permutation(self.length, seed)[positions]
        if len(positions) == 0 or len(positions) > 4 * WINDOW:
            return index_shuffle_np(positions, self.length - 1, seed)
        first, last = int(positions[0]), int(positions[-1])
        windows = [shuffle_window(self.length, seed, w) for w in range(first // WINDOW, last // WINDOW + 1)]
        joined = windows[0].copy() if len(windows) == 1 else np.concatenate(windows)
        offset = (first // WINDOW) * WINDOW
        return joined[first - offset : last - offset + 1]

    def describe(self) -> dict[str, Any] | None:
        """A compact, JSON-able description that regenerates the order (None: unshuffled)."""
        if self.seed is None:
            return None
        return {"seed": int(self.seed), "epoch": int(self.epoch), "n": int(self.length)}


WINDOW = 4096  # positions shuffled per vectorised call (amortises numpy overhead)


@functools.lru_cache(maxsize=16)
def shuffle_window(length: int, seed: int, window: int) -> np.ndarray:
    """Stable indices of positions ``[window * WINDOW, (window + 1) * WINDOW)`` (clipped).

    One vectorised Feistel call per 4,096 positions costs about as much as one per
    256, so readers share these small cached windows (32 KiB each, 16 at most).
    """
    start = window * WINDOW
    stop = min(start + WINDOW, length)
    out = index_shuffle_np(np.arange(start, stop, dtype=np.int64), length - 1, seed)
    out.setflags(write=False)
    return out


# ------------------------------------------------------------------------ batches
@dataclasses.dataclass
class ReadBatch:
    """Records handed out by :meth:`HostReader.next_batch`.

    ``columns``: field -> numpy array with a leading record axis; ``indices``: stable
    record index per record (int64); ``end``: epoch positions consumed after this
    batch (including skipped records before its last record).
    """

    columns: dict[str, np.ndarray]
    indices: np.ndarray
    end: int

    def __len__(self) -> int:
        return int(self.indices.shape[0])


@dataclasses.dataclass
class _Failure:
    position: int
    index: int
    cause: BaseException


@dataclasses.dataclass
class _Chunk:
    """Decoded records of positions ``[start, stop)``, bad ones left out."""

    columns: dict[str, np.ndarray]
    indices: np.ndarray
    positions: np.ndarray
    stop: int
    failures: list[_Failure]
    offset: int = 0  # records of this chunk already handed out

    @property
    def remaining(self) -> int:
        return int(self.indices.shape[0]) - self.offset


def _spec_of(value: Any) -> Any:
    """Per-record spec of one decoded field value."""
    if isinstance(value, (str, bytes)):
        return TextSpec(())
    array = np.asarray(value)
    if array.dtype.kind in "USO":
        return TextSpec(tuple(array.shape))
    return jax.ShapeDtypeStruct(tuple(array.shape), array.dtype)


def _describe_spec(spec: Any) -> str:
    if isinstance(spec, TextSpec):
        return f"text{tuple(spec.shape)}"
    return f"{np.dtype(spec.dtype).name}{tuple(spec.shape)}"


ALIGNMENT = 64  # bytes; JAX's CPU backend takes aligned host buffers about twice as fast


def _stack(values: list[Any]) -> np.ndarray:
    """Stack per-record values into one batch array, 64-byte aligned when numeric."""
    first = np.asarray(values[0])
    if first.dtype.kind in "USO":
        return np.stack([np.asarray(v) for v in values])
    shape = (len(values), *first.shape)
    nbytes = int(np.prod(shape)) * first.dtype.itemsize
    buffer = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-buffer.ctypes.data) % ALIGNMENT
    out = buffer[offset : offset + nbytes].view(first.dtype).reshape(shape)
    np.stack(values, out=out)
    return out


class RecordStructureError(ValueError):
    """A decoded record whose structure differs from the first record's."""


#: the fix a 64-bit message names last for a decoded value.
_DECODE_FIX = "cast or drop the field in decode"


def _describe_cause(cause: BaseException) -> str:
    """A failure's cause for a message: datarax's own errors in their words (without a
    closing period, the message goes on); others with their type."""
    if isinstance(cause, (RecordStructureError, DataraxError)):
        return str(cause).rstrip(".")
    return f"{type(cause).__name__}: {cause}"


# ------------------------------------------------------------------------ reader
class HostReader:
    """Reads, decodes and batches records of a random-access object on host threads.

    Args:
        data: ``len(data)``, ``data[i]`` and ideally ``data.__getitems__(indices)``.
        decode: raw record -> dict of arrays (numbers / numpy arrays / strings).
        locate: stable index -> ``(path, index_in_file)`` for error messages
            (default: ``(None, index)``).
        num_threads: reader threads (>= 1).
        read_ahead: chunks read and decoded ahead of the consumer (>= 1; default
            ``2 * num_threads``).
        chunk_size: positions per batched read (default: the first requested
            ``batch_size``, at least 64).
        policy: the :class:`ErrorPolicy` for bad records.
        name: how errors name the source (e.g. ``"ArrayRecordSourceModule"``).
        cast_float64: decoded ``float64`` values are cast to ``float32`` (else refused
            while x64 is off). Decoded values follow :mod:`datarax.core.dtypes`: 64-bit
            ints narrowed when they fit, Python ``int``/``float`` as JAX's defaults.
    """

    def __init__(
        self,
        data: Any,
        decode: Decode,
        *,
        locate: Locate | None = None,
        num_threads: int = 4,
        read_ahead: int | None = None,
        chunk_size: int | None = None,
        policy: ErrorPolicy | None = None,
        name: str = "source",
        cast_float64: bool = False,
    ) -> None:
        for label, value, low in (("num_threads", num_threads, 1), ("read_ahead", read_ahead, 1),
                                  ("chunk_size", chunk_size, 1)):
            if value is None and label != "num_threads":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} {label} must be an int >= {low}, got {value!r}.")
        if not callable(decode):
            raise ConfigError(f"{name} decode must be callable (bytes -> dict), got {decode!r}.")
        self.data = data
        self.decode = decode
        self._locate = locate
        self.num_threads = num_threads
        self.read_ahead = read_ahead if read_ahead is not None else 2 * num_threads
        self.chunk_size = chunk_size
        self.policy = policy or ErrorPolicy()
        self.name = name
        self.cast_float64 = cast_float64
        self._getitems = getattr(data, "__getitems__", None)
        self._spec: dict[str, Any] | None = None
        self._spec_index: int | None = None
        self._fast_spec: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque[concurrent.futures.Future[_Chunk]] = collections.deque()
        self._buffer: collections.deque[_Chunk] = collections.deque()
        self.ledger = SkipLedger(self.policy, name)  # bad records: pulled, then committed
        self._order: EpochOrder | None = None
        self._closed = False
        self.position = 0  # epoch positions consumed (handed out or skipped)
        self._next_read = 0  # first position not yet submitted for reading
        self._fatal: _Failure | None = None  # first bad record under on_error='raise'

    # ------------------------------------------------------------ description
    def __len__(self) -> int:
        return len(self.data)

    def locate(self, index: int) -> tuple[str | None, int]:
        """``(path, index_in_file)`` of stable record ``index``."""
        if self._locate is None:
            return None, int(index)
        return self._locate(int(index))

    def where(self, index: int) -> str:
        """Human-readable location of stable record ``index``."""
        path, in_file = self.locate(index)
        if path is None:
            return f"record {in_file}"
        return f"record {in_file} of file '{path}'"

    def record_error(self, index: int, cause: BaseException, *, epoch: int | None = None) -> RecordError:
        """The :class:`RecordError` for stable record ``index`` failing with ``cause``."""
        path, in_file = self.locate(index)
        detail = _describe_cause(cause)
        when = "" if epoch is None else f" (epoch {epoch})"
        hint = (
            "Fix or regenerate the file, or construct the source with on_error='skip' to "
            "drop bad records (they are counted and reported)."
        )
        err = RecordError(
            f"{self.name}: cannot read {self.where(index)}{when}: {detail}. {hint}",
            path=path,
            index=in_file,
        )
        err.__cause__ = cause
        return err

    def element_spec(self) -> dict[str, Any]:
        """Per-record spec from decoding the first readable record (cached)."""
        if self._spec is None:
            n = len(self.data)
            if n == 0:
                raise RecordError(f"{self.name} holds no records.")
            limit = 1 if not self.policy.skips else n
            budget = self.policy.budget(n)
            if budget is not None:
                limit = min(n, budget + 1)
            first_error: BaseException | None = None
            for index in range(limit):
                try:
                    raw = self.data[index]
                    record = self._decode_checked(raw, index, reference=None)
                except ConfigError as err:  # a setting (cast_float64), not a bad record
                    raise ConfigError(
                        f"{self.name}: decoding {self.where(index)}: "
                        f"{str(err).rstrip('.')}."
                    ) from err
                except Exception as err:  # noqa: BLE001 - reported with location
                    if first_error is None:
                        first_error = self.record_error(index, err)
                    continue
                self._spec = {k: _spec_of(v) for k, v in record.items()}
                self._fast_spec = {
                    k: (tuple(v.shape), np.dtype(v.dtype))
                    for k, v in self._spec.items()
                    if isinstance(v, jax.ShapeDtypeStruct)
                }
                self._spec_index = index
                break
            else:
                assert first_error is not None
                if limit > 1:
                    raise RecordError(
                        f"{self.name}: none of the first {limit} records could be read and "
                        "decoded, so the fields are unknown. The first failure: "
                        f"{first_error.args[0]}",
                        path=first_error.path,
                        index=first_error.index,
                    ) from first_error
                raise first_error
        return dict(self._spec)

    def _decode_checked(self, raw: Any, index: int, reference: dict[str, Any] | None) -> Mapping[str, Any]:
        record = self.decode(raw)
        fast = self._fast_spec
        if reference is not None and type(record) is dict and len(record) == len(fast) == len(reference):
            # Hot path: every field a numpy array of the first record's shape and dtype.
            try:
                for key, (shape, dtype) in fast.items():
                    value = record[key]
                    kind = type(value)
                    if not (kind is np.ndarray or issubclass(kind, np.generic)) or (
                        value.shape != shape or value.dtype != dtype
                    ):
                        break
                else:
                    return record
            except KeyError:
                pass
        if not isinstance(record, Mapping):
            raise RecordStructureError(
                f"decode returned {type(record).__name__}, expected a dict of arrays "
                "(e.g. {'image': np.frombuffer(record, np.uint8)})"
            )
        if not record:
            raise RecordStructureError("decode returned an empty dict; return at least one field")
        record = {
            key: fit_value(key, value, cast_float64=self.cast_float64, drop_hint=_DECODE_FIX)
            for key, value in record.items()
        }
        if reference is None:
            return record
        if list(record.keys()) != list(reference.keys()):
            raise RecordStructureError(
                f"decode returned fields {list(record.keys())}, the first record "
                f"(record {self._spec_index}) has {list(reference.keys())}"
            )
        out = {}
        for key, spec in reference.items():
            value = record[key]
            fast = self._fast_spec.get(key)
            if fast is not None and type(value) is np.ndarray and value.shape == fast[0] and value.dtype == fast[1]:
                out[key] = value
                continue
            got = _spec_of(value)
            if got != spec:
                raise RecordStructureError(
                    f"field '{key}' decodes to {_describe_spec(got)}, the first record's is "
                    f"{_describe_spec(spec)}; every record must decode to the same shapes and "
                    "dtypes"
                )
            out[key] = value
        return out

    # ---------------------------------------------------------------- reading
    def _fetch(self, indices: np.ndarray) -> tuple[list[Any], dict[int, BaseException]]:
        """Raw records for ``indices``; failing ones reported by slot."""
        keys = indices.tolist()
        if self._getitems is not None:
            try:
                return list(self._getitems(keys)), {}
            except Exception:  # noqa: BLE001 - narrow down to the failing record(s)
                pass
        records: list[Any] = []
        failures: dict[int, BaseException] = {}
        for slot, key in enumerate(keys):
            try:
                records.append(self.data[key])
            except Exception as err:  # noqa: BLE001
                records.append(None)
                failures[slot] = err
        return records, failures

    def _read_chunk(self, order: EpochOrder, start: int, stop: int) -> _Chunk:
        indices = order.indices(start, stop)
        raw, fetch_failures = self._fetch(indices)
        spec = self._spec
        assert spec is not None
        keep: list[int] = []
        decoded: list[dict[str, Any]] = []
        failures: list[_Failure] = []
        stop_early = not self.policy.skips
        for slot, record in enumerate(raw):
            cause = fetch_failures.get(slot)
            if cause is None:
                try:
                    decoded.append(self._decode_checked(record, slot, spec))
                    keep.append(slot)
                    continue
                except Exception as err:  # noqa: BLE001
                    cause = err
            failures.append(_Failure(start + slot, int(indices[slot]), cause))
            if stop_early:
                break
        columns = {key: _stack([r[key] for r in decoded]) for key in spec} if decoded else {}
        if len(keep) == len(raw):
            kept_indices = indices
            positions = np.arange(start, stop, dtype=np.int64)
        else:
            kept = np.asarray(keep, dtype=np.int64)
            kept_indices = indices[kept]
            positions = kept + start
        return _Chunk(columns, kept_indices, positions, stop, failures)

    # ------------------------------------------------------------- sessions
    def start(self, order: EpochOrder, position: int = 0, skipped: int = 0) -> None:
        """Begin (or resume) handing out ``order`` at epoch ``position``.

        ``skipped`` is the number of records already skipped before ``position`` in
        this epoch (from a saved state), so the skip budget continues exactly.
        """
        if self._closed:
            raise RuntimeError(f"{self.name} is closed; build a new source to read again.")
        self.stop()
        if not 0 <= position <= order.size:
            raise ValueError(f"position {position} outside the epoch's [0, {order.size}]")
        self.element_spec()
        self._order = order
        self.position = int(position)
        self.ledger.begin(order.epoch, skipped)
        self._next_read = int(position)

    @property
    def active(self) -> bool:
        """True while an epoch session is open (between :meth:`start` and its end)."""
        return self._order is not None

    @property
    def epoch(self) -> int | None:
        """Epoch of the open session (None when none is open)."""
        return None if self._order is None else self._order.epoch

    def ready_chunks(self) -> int:
        """Chunks read and decoded but not yet handed out (the read-ahead cache)."""
        done = sum(1 for f in self._pending if f.done())
        return done + sum(1 for c in self._buffer if c.remaining > 0)

    def _submit(self) -> None:
        order = self._order
        assert order is not None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.num_threads, thread_name_prefix=f"{self.name}-reader"
            )
        size = self.chunk_size or 64
        while len(self._pending) < self.read_ahead and self._next_read < order.size:
            stop = min(self._next_read + size, order.size)
            self._pending.append(self._pool.submit(self._read_chunk, order, self._next_read, stop))
            self._next_read = stop

    def _pull(self) -> bool:
        """Move the next chunk from the readers into the buffer; False at epoch end."""
        self._submit()
        if not self._pending:
            return False
        chunk = self._pending.popleft().result()
        self._submit()
        order = self._order
        assert order is not None
        for failure in chunk.failures:
            if not self.policy.skips:
                # Records before the bad one are still handed out; the batch that
                # would contain it raises.
                self._fatal = failure
                self._buffer.append(chunk)
                return False
            self.ledger.pull(self._skipped_record(order.epoch, failure), epoch_size=order.size)
        self._buffer.append(chunk)
        return True

    def _skipped_record(self, epoch: int, failure: _Failure) -> SkippedRecord:
        path, in_file = self.locate(failure.index)
        cause = failure.cause
        text = _describe_cause(cause)
        return SkippedRecord(epoch, failure.position, failure.index, path, in_file, text)

    def _commit(self, position: int) -> None:
        """The consumer has passed every position below ``position``."""
        self.ledger.commit(position)
        self.position = position

    @property
    def skipped(self) -> int:
        """Records skipped at positions below :attr:`position` this epoch."""
        return self.ledger.skipped

    def next_batch(self, batch_size: int) -> ReadBatch | None:
        """The next ``batch_size`` records (fewer at the epoch's end), or None when done."""
        if self._order is None:
            raise RuntimeError(f"{self.name}: call start(order) before next_batch().")
        if self.chunk_size is None:
            self.chunk_size = max(int(batch_size), 64)
        buffered = sum(c.remaining for c in self._buffer)
        while buffered < batch_size and self._fatal is None and self._pull():
            buffered += self._buffer[-1].remaining
        buffered = sum(c.remaining for c in self._buffer)
        if self._fatal is not None and buffered < batch_size:
            fatal = self._fatal
            raise self.record_error(fatal.index, fatal.cause, epoch=self._order.epoch)
        if buffered == 0:
            self._commit(self._order.size)
            self.stop(keep_position=True)
            return None
        # Fast path: one whole chunk is exactly the batch.
        first = self._buffer[0]
        if first.offset == 0 and first.remaining == batch_size:
            self._buffer.popleft()
            self._commit(int(first.positions[-1]) + 1)
            return ReadBatch(first.columns, first.indices, self.position)
        parts: list[tuple[_Chunk, int, int]] = []
        need = batch_size
        while need > 0 and self._buffer:
            chunk = self._buffer[0]
            take = min(need, chunk.remaining)
            if take > 0:
                parts.append((chunk, chunk.offset, chunk.offset + take))
                chunk.offset += take
                need -= take
            if chunk.remaining == 0:
                self._buffer.popleft()
        last_chunk, _, last_stop = parts[-1]
        end = int(last_chunk.positions[last_stop - 1]) + 1
        if len(parts) == 1:
            chunk, a, b = parts[0]
            columns = {k: v[a:b] for k, v in chunk.columns.items()}
            indices = chunk.indices[a:b]
        else:
            columns = {
                k: np.concatenate([c.columns[k][a:b] for c, a, b in parts]) for k in parts[0][0].columns
            }
            indices = np.concatenate([c.indices[a:b] for c, a, b in parts])
        self._commit(end)
        return ReadBatch(columns, indices, self.position)

    def skipped_records(self) -> list[SkippedRecord]:
        """Reports of records skipped so far (first ``MAX_REPORTS``), in order."""
        return list(self.ledger.reports)

    @property
    def skipped_total(self) -> int:
        """All records skipped since this reader was built (reports may be capped)."""
        return self.ledger.total

    # -------------------------------------------------------------- closing
    def stop(self, keep_position: bool = True) -> None:
        """End the epoch session: cancel read-ahead and join the reader threads."""
        for future in self._pending:
            future.cancel()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._buffer.clear()
        self.ledger.drop_pending()
        self._fatal = None
        self._order = None

    def close(self) -> None:
        """Stop and refuse further reads."""
        self.stop()
        self._closed = True

    def __enter__(self) -> HostReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            pool = self._pool
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass
