"""``Pipeline``: a source, a list of stages and a batch size, iterated epoch by epoch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from flax import nnx

from datarax.core.data_source import DataSourceModule
from datarax.core.errors import ConfigError, SourceContractError, StateError
from datarax.core.keys import default_key, reserve_draw
from datarax.core.operator import OperatorModule
from datarax.pipeline.stats import PipelineStats

if TYPE_CHECKING:
    from datarax.pipeline.iterator import PipelineIterator

Batch = dict[str, Any]


class Pipeline(nnx.Module):
    """Batches of JAX arrays from a source through a list of stages.

    Every ``iter(pipeline)`` (every ``for batch in pipeline``) is one new epoch over the
    whole source: each record appears exactly once, in the last batch short or dropped
    (``drop_remainder=True``). Indexed sources run as one compiled step per batch;
    streaming and host sources are read on the host, checked against their
    ``element_spec()``, and the stages run compiled.

    Args:
        source: a :class:`~datarax.core.data_source.DataSourceModule`.
        stages: operators (``OperatorModule``, e.g. ``ElementOperator``) or plain
            callables mapping a batch dict to a batch dict, applied in order.
        batch_size: records per batch (>= 1).
        rngs: ``nnx.Rngs``; stochastic stages built without their own ``rngs`` draw
            their base key from it. Defaults to ``nnx.Rngs(0)``.
        drop_remainder: drop the short last batch of each epoch.
        prefetch: compiled batches dispatched ahead of the one being consumed.
        shard_index, shard_count: this process's share of every epoch; default
            ``jax.process_index()`` of ``jax.process_count()``. Each share is a disjoint,
            equally long block of the epoch's (globally shuffled) order; the last
            ``len(source) % shard_count`` positions of each epoch are left out so every
            process takes the same number of steps. Per-record keys do not depend on it.
        check_finite: refuse batches holding NaN or inf in a floating field, naming the
            field, the record's position in the epoch and its stable index (copies each
            batch to the host: a debugging aid, off by default).

    Example:
        >>> import numpy as np
        >>> from flax import nnx
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
        >>> p = Pipeline(source=src, stages=[], batch_size=2, rngs=nnx.Rngs(0))
        >>> [b["x"].tolist() for b in p]
        [[0, 1], [2, 3], [4]]
    """

    def __init__(
        self,
        source: DataSourceModule,
        stages: Sequence[OperatorModule | Callable[[Batch], Batch]] = (),
        batch_size: int = 32,
        rngs: nnx.Rngs | None = None,
        drop_remainder: bool = False,
        *,
        prefetch: int = 2,
        shard_index: int | None = None,
        shard_count: int | None = None,
        check_finite: bool = False,
    ) -> None:
        if not isinstance(source, DataSourceModule):
            raise SourceContractError(
                f"Pipeline source must be a DataSourceModule (e.g. MemorySource), got "
                f"{type(source).__name__}. Wrap in-memory data with "
                "MemorySource(MemorySourceConfig(), data)."
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"Pipeline batch_size must be an int >= 1, got {batch_size!r}.")
        if not isinstance(drop_remainder, bool):
            raise ConfigError(
                f"Pipeline drop_remainder must be a bool, got {type(drop_remainder).__name__}."
            )
        if not isinstance(check_finite, bool):
            raise ConfigError(
                f"Pipeline check_finite must be a bool, got {type(check_finite).__name__}."
            )
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigError(f"Pipeline prefetch must be an int >= 0, got {prefetch!r}.")
        if isinstance(stages, (OperatorModule, str)) or not isinstance(stages, Sequence):
            raise SourceContractError(
                f"Pipeline stages must be a list of operators, got {type(stages).__name__}; "
                "wrap a single stage in a list: stages=[op]."
            )
        for i, stage in enumerate(stages):
            if isinstance(stage, DataSourceModule) or not callable(stage) and not isinstance(
                stage, OperatorModule
            ):
                raise SourceContractError(
                    f"Pipeline stage {i} is {type(stage).__name__}, which is neither an "
                    "operator module (e.g. ElementOperator) nor a callable taking and "
                    "returning a batch dict."
                )
        if (
            not source.supports_indexed_access()
            and source.supports_streaming()
            and type(source).element_spec is DataSourceModule.element_spec
        ):
            raise SourceContractError(
                f"{type(source).__name__} implements get_batch but not element_spec(); a "
                "streaming source must declare what its batches carry (a dict of "
                "jax.ShapeDtypeStruct per record, or TextSpec for strings) so Pipeline can "
                "check every batch."
            )
        if source.supports_indexed_access():
            try:
                n = len(source)  # type: ignore[arg-type]
            except TypeError as err:
                raise SourceContractError(
                    f"{type(source).__name__} implements get_batch_at but not __len__; an "
                    "indexed source must say how many records one epoch holds."
                ) from err
            if n == 0:
                raise ConfigError(f"Pipeline source {type(source).__name__} holds no records.")
        count = jax.process_count() if shard_count is None else shard_count
        index = jax.process_index() if shard_index is None else shard_index
        try:
            source.set_shard(index, count)
        except ValueError as err:
            raise ConfigError(f"Pipeline: {err}") from err
        self.source = source
        self.stages = nnx.List(list(stages))
        self._batch_size = nnx.static(batch_size)
        self._drop_remainder = nnx.static(drop_remainder)
        self._prefetch = nnx.static(prefetch)
        self._check_finite = nnx.static(check_finite)
        # Stages without their own rngs derive their key from this one inside the
        # compiled step (fold_in(key, stage position)), so building costs no device work.
        if rngs is not None:
            key, count = reserve_draw(rngs, "default", "Pipeline")
        else:
            key, count = default_key(), np.uint32(0)
        self.key = nnx.Variable(key)
        self.key_count = nnx.Variable(count)
        self.epoch = nnx.Variable(-1)  # epoch of the latest iterator; -1 before the first
        self.position = nnx.Variable(0)  # records handed out in that epoch
        self._pending_state: dict[str, Any] | None = None
        self._stats = PipelineStats()

    def stats(self) -> dict[str, Any]:
        """Per-stage seconds (read, validate, transfer, stages, step, compile, wait),
        counts and the steady-state stage that took longest, accumulated since construction or :meth:`reset_stats`.

        Sources with their own timers (the threaded host reader) report under
        ``"source"``. See :mod:`datarax.pipeline.stats` for what each timer covers.
        """
        source_stats = getattr(self.source, "stats", None)
        return self._stats.as_dict(source_stats() if callable(source_stats) else None)

    def reset_stats(self) -> None:
        """Zero the counters :meth:`stats` reports."""
        self._stats.reset()

    def stages_fingerprint(self) -> str:
        """A short, stable digest of the stages: types, names, configs, functions.

        Part of the saved state's settings, so a state from a pipeline with other
        stages is refused.
        """
        parts = []
        for stage in self.stages:
            if isinstance(stage, OperatorModule):
                fn = getattr(stage, "fn", None)
                parts.append(
                    f"{type(stage).__qualname__}|{stage.name}|{sorted(stage.config.to_dict().items())!r}"
                    f"|{getattr(fn, '__qualname__', '')}"
                )
            else:
                parts.append(f"callable|{getattr(stage, '__qualname__', type(stage).__qualname__)}")
        return _digest("\n".join(parts))

    def rng_fingerprint(self) -> str:
        """A short digest of every key the pipeline and its stages draw from."""
        material = [self.key.get_value(), self.key_count.get_value()]
        for stage in self.stages:
            if isinstance(stage, OperatorModule) and stage.stochastic and stage._key_given:
                material += [stage.base_key.get_value(), stage.base_count.get_value()]
        data = []
        for value in material:
            if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
                value = jax.random.key_data(value)
            data.append(np.asarray(value).tobytes())
        return _digest(b"".join(data))

    def key_pair(self) -> tuple[Any, Any]:
        """``(key, count)``: the pipeline key is ``fold_in(key, count)`` (made in-step)."""
        return self.key.get_value(), self.key_count.get_value()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def drop_remainder(self) -> bool:
        return self._drop_remainder

    def __iter__(self) -> PipelineIterator:
        """Start the next epoch (or continue the one a ``set_state`` restored)."""
        from datarax.pipeline.iterator import PipelineIterator

        self.source.check_contract()
        pending, self._pending_state = self._pending_state, None
        iterator = PipelineIterator(self, epoch=int(self.epoch.get_value()) + 1)
        if pending is not None:
            iterator.set_state(pending)
        return iterator

    def get_state(self) -> dict[str, Any]:
        """State of the latest epoch: restore it with :meth:`set_state` to continue it."""
        from datarax.pipeline.iterator import make_state

        if self._pending_state is not None:
            return dict(self._pending_state)
        return make_state(self, int(self.epoch.get_value()), int(self.position.get_value()))

    def set_state(self, state: dict[str, Any]) -> None:
        """Make the next ``iter(pipeline)`` continue exactly where ``state`` was taken."""
        from datarax.pipeline.iterator import check_state

        if not isinstance(state, dict):
            raise StateError(
                f"Pipeline.set_state expects the dict get_state() returned, got "
                f"{type(state).__name__}."
            )
        check_state(self, state)
        self._pending_state = dict(state)


def _digest(material: str | bytes) -> str:
    """First 12 hex digits of the SHA-256 of ``material``."""
    import hashlib

    raw = material.encode() if isinstance(material, str) else material
    return hashlib.sha256(raw).hexdigest()[:12]
