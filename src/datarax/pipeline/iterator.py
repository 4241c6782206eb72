"""``PipelineIterator``: one epoch of a Pipeline, with exact, small, JSON-able state."""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import concat_batches
from datarax.core.errors import SpecMismatchError, StateError
from datarax.core.keys import draw
from datarax.core.spec import first_nonfinite, is_text_value, validate_batch
from datarax.pipeline.steps import apply_stages, indexed_step, stage_step

if TYPE_CHECKING:
    from datarax.pipeline.pipeline import Pipeline

Batch = dict[str, Any]
STATE_VERSION = 1
_INT32_MAX = 2**31 - 1


def settings(pipeline: Pipeline) -> dict[str, Any]:
    """The settings a saved state must agree with to be restored here."""
    source = pipeline.source
    out: dict[str, Any] = {
        "batch_size": pipeline.batch_size,
        "drop_remainder": pipeline.drop_remainder,
        "source": type(source).__name__,
        "num_records": source._length_or_none(),
        "shard": list(source.shard),
    }
    for name, value in source.config.to_dict().items():
        if name in ("num_epochs", "track_metadata"):
            continue
        if isinstance(value, (bool, int, float, str)):  # None is left out: .get() gives it
            out[f"source.{name}"] = value
    out["stages"] = pipeline.stages_fingerprint()
    out["rngs"] = pipeline.rng_fingerprint()
    return out


def make_state(pipeline: Pipeline, epoch: int, position: int) -> dict[str, Any]:
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "epoch": epoch,
        "position": position,
        "settings": settings(pipeline),
    }
    if not pipeline.source.supports_indexed_access():
        state["source"] = pipeline.source.get_state()
    return state


_DIGEST_HINTS = {
    "stages": " (digests of the stages: their classes, names, configs and functions, in "
    "order; build the same stages)",
    "rngs": " (digests of the keys the pipeline and its stages draw from; build it with "
    "the same rngs seed)",
}


def check_state(pipeline: Pipeline, state: dict[str, Any]) -> None:
    """Refuse a state from another configuration or a tampered one, naming the field."""
    for key in ("version", "epoch", "position", "settings"):
        if key not in state:
            raise StateError(
                f"Pipeline state is missing '{key}'; pass the dict that get_state() "
                f"returned (got keys {sorted(state)}).",
                field=key,
            )
    if state["version"] != STATE_VERSION:
        raise StateError(
            f"Pipeline state version {state['version']!r} is not {STATE_VERSION}, the version "
            "this datarax writes; the state comes from another datarax release or was "
            "tampered with. Restore it with the release that saved it.",
            field="version",
        )
    epoch, position = state["epoch"], state["position"]
    for key, value, low in (("epoch", epoch, -1), ("position", position, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise StateError(
                f"Pipeline state '{key}' must be an int >= {low}, got {value!r}; the state "
                "was tampered with.",
                field=key,
            )
    saved = state["settings"]
    current = settings(pipeline)
    if not isinstance(saved, dict):
        raise StateError(
            f"Pipeline state 'settings' must be the dict get_state() wrote, got "
            f"{type(saved).__name__}; the state was tampered with.",
            field="settings",
        )
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            raise StateError(
                f"Pipeline state was saved with {key}={saved.get(key)!r} but this pipeline "
                f"has {key}={current.get(key)!r}{_DIGEST_HINTS.get(key, '')}; restore it "
                "into an identically configured pipeline.",
                field=key,
            )
    n = current["num_records"]
    if n is not None:
        lo, hi = pipeline.source.shard_bounds(n)
        n = hi - lo
    if n is not None and position > n:
        raise StateError(
            f"Pipeline state position={position} is past the end of the epoch ({n} "
            "records).",
            field="position",
        )
    if not pipeline.source.supports_indexed_access() and "source" not in state:
        raise StateError("Pipeline state is missing 'source' (the source's position).", field="source")


def _cache_size(step: Any) -> int:
    """Executables a jitted function holds (0 where JAX does not say)."""
    size = getattr(step, "_cache_size", None)
    return int(size()) if callable(size) else 0


def _head(array: Any, count: int) -> Any:
    """The first ``count`` records of a batch field (the short last batch).

    On the CPU backend this is a zero-copy host view put back as a JAX array, which
    avoids compiling a slice per field; elsewhere it is an ordinary (cached) slice.
    """
    if isinstance(array, jax.Array) and all(d.platform == "cpu" for d in array.devices()):
        return jax.device_put(np.asarray(array)[:count])
    return array[:count]


class PipelineIterator:
    """One epoch of a :class:`Pipeline`; yields dicts of JAX arrays.

    ``get_state()`` returns a small JSON-able dict counting only the batches handed
    out; ``set_state()`` on an iterator of an identically built pipeline continues with
    exactly the remaining batches. Iterators are context managers; ``close()`` ends
    the epoch early and releases what the source holds for it.
    """

    def __init__(self, pipeline: Pipeline, epoch: int) -> None:
        self._pipeline = pipeline
        self._source = pipeline.source
        self._indexed = self._source.supports_indexed_access()
        self._batch_size = pipeline.batch_size
        self._queue: collections.deque[tuple[int, Batch, int]] = collections.deque()
        self._closed = False
        self._started = False
        self._stage_graph: tuple[Any, Any] | None = None
        self._stats = pipeline._stats
        self._begin(epoch, 0)

    # ---------------------------------------------------------------- position
    def _begin(self, epoch: int, position: int) -> None:
        self._epoch = epoch
        self._position = position  # records handed out
        self._dispatched = position  # records dispatched (indexed path)
        self._queue.clear()
        self._started = False
        self._pass_done = False
        self._pipeline.epoch.set_value(epoch)
        self._pipeline.position.set_value(position)
        if self._indexed:
            self._source._cursor.current_epoch.set_value(epoch)
            self._source._cursor.current_index.set_value(position)

    @property
    def epoch(self) -> int:
        return self._epoch

    def _epoch_records(self) -> int | None:
        """Records this process hands out per epoch (its shard, less a dropped remainder)."""
        n = self._source._length_or_none()
        if n is None:
            return None
        lo, hi = self._source.shard_bounds(n)
        n = hi - lo
        if self._pipeline.drop_remainder:
            return n - n % self._batch_size
        return n

    def get_state(self) -> dict[str, Any]:
        """Small JSON-able state: epoch, records handed out, settings, source position."""
        return make_state(self._pipeline, self._epoch, self._position)

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline)."""
        check_state(self._pipeline, state)
        epoch, position = state["epoch"], state["position"]
        if epoch < 0:
            epoch, position = 0, 0
        self._begin(epoch, position)
        if not self._indexed:
            # Open the saved pass first (a stream may set itself up in start_epoch),
            # then move to the saved position inside it.
            self._source.start_epoch(epoch)
            self._source.set_state(state["source"])
            self._started = True  # the restored source position is the start point

    # -------------------------------------------------------------- iteration
    def __iter__(self) -> PipelineIterator:
        return self

    def __enter__(self) -> PipelineIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop this epoch early; further ``next()`` raises ``StopIteration``."""
        self._closed = True
        self._queue.clear()
        closer = getattr(self._source, "close_epoch", None)
        if closer is not None and not self._indexed:
            closer()

    def __next__(self) -> Batch:
        if self._closed:
            raise StopIteration
        with self._stats.timer("wait"):
            batch = self._next_indexed() if self._indexed else self._next_host()
        self._stats.count(len(next(iter(batch.values()))) if batch else 0)
        return batch

    # ------------------------------------------------------------ indexed path
    def _prepare_indexed(self) -> None:
        graphdef, state = nnx.split((self._source, list(self._pipeline.stages)))
        self._step = indexed_step(graphdef, self._batch_size)
        self._state = state
        self._key = self._pipeline.key_pair()
        self._n = len(self._source)  # type: ignore[arg-type]
        self._lo = self._source.shard_bounds(self._n)[0]
        self._started = True

    def _dispatch_one(self) -> bool:
        total = self._epoch_records()
        assert total is not None
        if self._dispatched >= total:
            return False
        start = self._epoch * self._n + self._lo + self._dispatched
        if start + self._batch_size > _INT32_MAX and not jax.config.jax_enable_x64:
            raise OverflowError(
                f"epoch {self._epoch} of a {self._n}-record source passes 2**31 global "
                "record positions; enable jax_enable_x64 to continue."
            )
        position_dtype = np.int64 if jax.config.jax_enable_x64 else np.int32
        cached = _cache_size(self._step)
        began = time.perf_counter()
        batch = self._step(self._state, position_dtype(start), np.int32(self._epoch), self._key)
        # A call that added an executable to the step's cache traced and compiled it.
        timer = "compile" if _cache_size(self._step) > cached else "step"
        self._stats.seconds[timer] += time.perf_counter() - began
        count = min(self._batch_size, total - self._dispatched)
        if count < self._batch_size:
            batch = {k: _head(v, count) for k, v in batch.items()}
        self._dispatched += count
        self._queue.append((count, batch, start))
        return True

    def _next_indexed(self) -> Batch:
        if not self._started:
            self._prepare_indexed()
        while len(self._queue) <= self._pipeline._prefetch and self._dispatch_one():
            pass
        if not self._queue:
            raise StopIteration
        count, batch, start = self._queue.popleft()
        if self._pipeline._check_finite:
            self._check_finite(
                batch, lambda: self._source.record_indices_at(start, self._batch_size, None)
            )
        self._handed_out(count)
        return batch

    def _handed_out(self, count: int) -> None:
        self._position += count
        self._pipeline.position.set_value(self._position)
        if self._indexed:
            self._source._cursor.current_index.set_value(self._position)

    # --------------------------------------------------------------- host path
    def _next_host(self) -> Batch:
        source = self._source
        if not self._started:
            source.start_epoch(self._epoch)
            self._started = True
        with self._stats.timer("read"):
            batch, indices = self._read_full_batch(source)
        if batch is None:
            raise StopIteration
        count = len(next(iter(batch.values())))
        if count < self._batch_size and self._pipeline.drop_remainder:
            raise StopIteration
        with self._stats.timer("validate"):
            validate_batch(
                batch,
                source.checked_element_spec(),
                batch_size=self._batch_size,
                where=f"{type(source).__name__} batch at record {self._position} of epoch "
                f"{self._epoch}",
            )
        stages = list(self._pipeline.stages)
        if stages:
            with self._stats.timer("stages"):
                batch = self._run_stages(stages, batch, np.asarray(indices))
        else:
            with self._stats.timer("transfer"):
                batch = {k: v if is_text_value(v) else jax.device_put(v) for k, v in batch.items()}
        if self._pipeline._check_finite:
            self._check_finite(batch, lambda: indices)
        self._handed_out(count)
        return batch

    def _check_finite(self, batch: Batch, stable_indices: Any) -> None:
        found = first_nonfinite(batch)
        if found is None:
            return
        field, row = found
        stable = int(np.asarray(stable_indices())[row])
        raise SpecMismatchError(
            f"{type(self._source).__name__}: field '{field}' of the record at position "
            f"{self._position + row} of epoch {self._epoch} (stable index {stable}) holds "
            "NaN or inf (check_finite=True). Fix or filter that record in the source or "
            "the stage that produced it.",
            fields=[field],
        )

    def _read_full_batch(self, source: Any) -> tuple[Batch | None, Any]:
        """Exactly ``batch_size`` records, or fewer only where the pass ends.

        A source may return short batches mid-pass (e.g. at a file boundary); they are
        joined so that no record is lost and every batch but the last is full.
        """
        parts: list[tuple[Batch, np.ndarray]] = []
        have = 0
        while have < self._batch_size and not self._pass_done:
            batch, indices = source.get_batch_with_indices(self._batch_size - have)
            if batch is None:
                self._pass_done = True  # ask nothing more of this pass
                break
            batch = dict(batch)
            count = len(next(iter(batch.values())))
            if indices is None:
                indices = np.arange(self._position + have, self._position + have + count)
            parts.append((batch, np.asarray(indices)))
            have += count
        if not parts:
            return None, None
        if len(parts) == 1:
            return parts[0]
        return concat_batches([b for b, _ in parts]), np.concatenate([i for _, i in parts])

    def _run_stages(self, stages: list[Any], batch: Batch, indices: np.ndarray) -> Batch:
        epoch = np.int32(self._epoch)
        key = self._pipeline.key_pair()
        if any(is_text_value(v) for v in batch.values()):
            return apply_stages(stages, batch, jnp.asarray(indices), epoch, draw(*key))
        if self._stage_graph is None:  # split once per epoch session, not per batch
            self._stage_graph = nnx.split(stages)
        graphdef, state = self._stage_graph
        return stage_step(graphdef)(state, batch, indices.astype(np.int32), epoch, key)
