"""Fused data + train steps: ``Pipeline.scan`` runs k of them as one compiled program.

For an indexed source a batch is a pure function of (global position, epoch, key)
(:func:`~datarax.pipeline.steps.indexed_batch`), so the batches of k steps need no
host at all: the host computes the k positions (crossing epoch ends by the same rule
as iteration), and one ``nnx.jit`` program runs ``nnx.scan`` over them, each step
gathering its batch, running the stages and calling ``train_step(*modules, batch)``.
The source's position then moves past the k batches, so a state taken after any
chunk resumes exactly: the batches are those a Python loop over the pipeline serves.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> class Total(nnx.Module):
    ...     def __init__(self):
    ...         self.sum = nnx.Variable(np.int32(0))
    >>> def train_step(total, batch):
    ...     total.sum.value = total.sum.value + batch["x"].sum()
    ...     return batch["x"]
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> pipeline = Pipeline(source=source, batch_size=2)
    >>> total = Total()
    >>> pipeline.scan(train_step, length=4, modules=(total,)).tolist(), int(total.sum.value)
    ([[0, 1], [2, 3], [4, 5], [0, 1]], 16)
    >>> pipeline.epoch, pipeline.position
    (1, 2)
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import weakref
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.data_source import SourceKind
from datarax.core.errors import ConfigError
from datarax.core.spec import refuse_declared_64bit
from datarax.pipeline.plan import PassContext
from datarax.pipeline.steps import indexed_batch

_INT32_MAX = 2**31 - 1
# The lengths each program was called with in this process: a first call of a length
# traces and compiles, and stats() counts it as "compile", the calls after it as "step".
_CALLED: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()


def check_scan(context: PassContext, length: Any) -> None:
    """Refuse what ``Pipeline.scan`` cannot run, before anything moves."""
    source = context.source
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ConfigError(f"Pipeline.scan length must be an int >= 1, got {length!r}.")
    refuse_declared_64bit(source)
    if source.kind is not SourceKind.INDEXED:
        raise ConfigError(
            f"Pipeline.scan needs an indexed source (a batch computed on the device from "
            f"its position); {type(source).__name__} is a {source.kind.value} source. Iterate "
            "it with a Python loop (for batch in pipeline) instead."
        )
    if context.plan.pad_remainder:
        raise ConfigError(
            "Pipeline.scan runs full batches without the 'valid' field pad_remainder=True "
            "adds; evaluate a padded pipeline with a loop (for batch in pipeline) or step()."
        )
    size = source.epoch_size() or 0
    if size % context.plan.batch_size and not context.plan.drop_remainder:
        raise ConfigError(
            f"Pipeline.scan runs full batches only, but an epoch of {size} records ends in a "
            f"short batch of {size % context.plan.batch_size}; set drop_remainder=True (or a "
            "batch size dividing the epoch)."
        )
    elastic = context.elastic_epoch(source.epoch)
    if elastic is not None and source.index < context.plan.served(elastic.size):
        raise ConfigError(
            f"Pipeline.scan cannot run inside epoch {source.epoch}, which an elastic restore "
            "re-split into runs; serve its rest with step() or a loop, then scan."
        )
    if context.plan.placement is not None and jax.process_count() > 1:
        raise ConfigError(
            "Pipeline.scan with sharding= runs in one process only; under several processes "
            "iterate the pipeline (each process contributes its share)."
        )


def scan_positions(
    context: PassContext, epoch: int, index: int, length: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Global start positions and epochs of the next ``length`` full batches from record
    ``index`` of pass ``epoch``, and the ``(epoch, index)`` standing after them."""
    source = context.source
    n = len(source)  # type: ignore[arg-type]
    lo = source.shard.bounds(n)[0]
    batch = context.plan.batch_size
    size = source.epoch_size() or 0
    starts, epochs = [], []
    for _ in range(length):
        if index + batch > size:  # the pass is over: the next batch opens the next one
            epoch, index = epoch + 1, 0
        starts.append(epoch * n + lo + index)
        epochs.append(epoch)
        index += batch
    if starts[-1] + batch > _INT32_MAX and not jax.config.jax_enable_x64:
        raise OverflowError(
            f"epoch {epoch} of a {n}-record source passes 2**31 global record positions; "
            "enable jax_enable_x64 to continue."
        )
    position_dtype = np.int64 if jax.config.jax_enable_x64 else np.int32
    return np.asarray(starts, position_dtype), np.asarray(epochs, np.int32), (epoch, index)


@functools.lru_cache(maxsize=16)
def scan_program(train_step: Callable[..., Any], batch_size: int, placement: Any) -> Any:
    """The cached compiled ``(modules, data, inputs, starts, epochs, key) -> outputs``."""

    def run(modules: Any, data: Any, inputs: Any, starts: Any, epochs: Any, key: Any) -> Any:
        def body(modules: Any, data: Any, position: Any) -> tuple[Any, Any]:
            source, stages = data
            start, epoch = position
            batch = indexed_batch(source, stages, inputs, start, epoch, key, batch_size)
            if placement is not None:
                batch = {
                    name: jax.lax.with_sharding_constraint(
                        value, placement.field_sharding(value.ndim)
                    )
                    for name, value in batch.items()
                }
            return modules, train_step(*modules, batch)

        scan = nnx.scan(body, in_axes=(nnx.Carry, None, 0), out_axes=(nnx.Carry, 0))
        return scan(modules, data, (starts, epochs))[1]

    return nnx.jit(run)


def run_scan(
    context: PassContext, train_step: Callable[..., Any], length: int, modules: Any,
    epoch: int, index: int,
) -> Any:
    """Run ``length`` fused steps from record ``index`` of pass ``epoch``; move the source
    past them and return ``train_step``'s outputs stacked along a leading axis."""
    source = context.source
    starts, epochs, (end_epoch, end_index) = scan_positions(context, epoch, index, length)
    program = scan_program(train_step, context.plan.batch_size, context.plan.placement)
    data = (source, list(context.stages))
    lengths = _CALLED.setdefault(program, set())
    with context.stats.timer("step" if length in lengths else "compile"):
        out = program(
            tuple(modules), data, source.step_inputs(), starts, epochs, context.key_pair()
        )
    lengths.add(length)
    source.seek(end_epoch, end_index)
    for _ in range(length):
        context.stats.count(context.plan.batch_size)
    return out
