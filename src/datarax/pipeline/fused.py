"""Fused data + train steps: ``Pipeline.scan`` runs k of them as one compiled program.

For an indexed source a batch is a pure function of (global position, epoch, key), so
the host computes k positions and one ``jax.lax.scan`` program gathers each batch, runs
the stages and calls ``train_step(*modules, batch)``. The batches are those a Python loop
serves, and the position moves past them.

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

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.config import check_count
from datarax.core.errors import ConfigError, callable_name, refused_call
from datarax.core.spec import refuse_declared_64bit, text_fields
from datarax.core.step_cache import cached, split_for_step
from datarax.host.counts import count_words
from datarax.pipeline.dispatch import position_dtype
from datarax.pipeline.plan import PassContext
from datarax.pipeline.steps import indexed_batch

# the lengths each program was called with (a first call counts as "compile")
_CALLED: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()


def check_scan(context: PassContext, length: Any) -> int:
    """Refuse what ``Pipeline.scan`` cannot run, before anything moves; ``length`` as an int."""
    source = context.source
    length = check_count(length, "Pipeline.scan length", 1)
    refuse_declared_64bit(source)
    if not context.reading.compiled:
        raise ConfigError(
            f"Pipeline.scan needs an indexed source (a batch computed on the device from "
            f"its position); {type(source).__name__} is a {context.reading.kind_name} source. Iterate "
            "it with a Python loop (for batch in pipeline) instead."
        )
    text = text_fields(source.element_spec())
    if text:
        raise ConfigError(
            f"Pipeline.scan runs the data and the train step as one compiled program, but "
            f"{type(source).__name__}'s text field(s) {text} stay on the host and cannot go "
            "into it (the scanned batches would lack them). Iterate the pipeline (for batch "
            "in pipeline, or step()), or leave the text out of the source (tokenize it into "
            "int arrays first) to scan."
        )
    if context.plan.stages_on == "host":
        raise ConfigError(
            "Pipeline.scan runs the data and the train step as one compiled program on the "
            "device, but this pipeline was built with stages_on='host' (its stages on the "
            "host CPU). Iterate it (for batch in pipeline, or step()), or build it with "
            "stages_on='device' to scan."
        )
    if context.plan.pad_remainder:
        raise ConfigError(
            "Pipeline.scan runs full batches without the 'valid' field pad_remainder=True "
            "adds; evaluate a padded pipeline with a loop (for batch in pipeline) or step()."
        )
    size = source.epoch_size() or 0
    if size % context.plan.batch_size and not context.plan.drop_remainder:
        raise ConfigError(
            f"Pipeline.scan runs full batches only, but an epoch of {count_words(size, 'record')} "
            "ends in a "
            f"short batch of {size % context.plan.batch_size}; set drop_remainder=True (or a "
            "batch size dividing the epoch)."
        )
    resplit = context.resplit(source.epoch)
    if resplit is not None and source.index < context.plan.end(resplit.size(len(source)), 0):
        raise ConfigError(
            f"Pipeline.scan cannot run inside epoch {source.epoch}, which a restore on another "
            "process count re-split into runs; serve its rest with step() or a loop, then scan."
        )
    if context.plan.placement is not None and jax.process_count() > 1:
        raise ConfigError(
            "Pipeline.scan with sharding= runs in one process only; under several processes "
            "iterate the pipeline (each process contributes its share)."
        )
    return length


def scan_pipeline(
    context: PassContext, train_step: Callable[..., Any], length: Any, modules: Any
) -> Any:
    """``Pipeline.scan``: from the live pass where it stands, else from the next pass;
    a scan that raises moves nothing (a Ctrl-C in its write-back: both move, then it raises)."""
    session, source = context.session, context.source
    length = check_scan(context, length)
    modules = tuple(modules) if isinstance(modules, (tuple, list)) else (modules,)
    check_train_step(train_step, modules)
    live = session.live_iterator()
    continued = live is not None and not live.exhausted
    if continued:
        epoch, resume_at = source.epoch, source.index
    else:
        epoch, resume_at = session.next_pass(source)
    if live is not None:
        live.supersede()
    session.live = session.stepper = None
    try:
        return run_scan(context, train_step, length, modules, epoch, resume_at or 0)
    except BaseException:
        if continued:  # not "left here": the next pass goes on with the live one's rest
            session.left = None
        raise


_NOT_MODULES = (jax.Array, np.ndarray, np.generic, int, float, complex, str, bytes)


def check_train_step(train_step: Any, modules: tuple[Any, ...]) -> None:
    """Refuse ``modules`` that are no NNX state, and a ``train_step`` that cannot be
    called as ``train_step(*modules, batch)``, before anything moves."""
    if not callable(train_step):
        raise ConfigError(
            f"Pipeline.scan(train_step, length, modules) takes the train step first, a "
            f"callable train_step(*modules, batch); got {type(train_step).__name__}."
        )
    for i, module in enumerate(modules):
        if module is None or isinstance(module, _NOT_MODULES):
            raise ConfigError(
                f"Pipeline.scan modules[{i}] is a {type(module).__name__}; modules= takes "
                "the NNX objects train_step changes (an nnx.Module, an nnx.Optimizer), whose "
                "state is carried from step to step. Close over constants in train_step."
            )
    refused = refused_call(train_step, *modules, {})
    if refused is not None:
        signature, err = refused
        name = callable_name(train_step)
        raise ConfigError(
            f"Pipeline.scan calls train_step(*modules, batch): here "
            f"{count_words(len(modules), 'module')} then the batch, "
            f"{count_words(len(modules) + 1, 'positional argument')}, but "
            f"{name}{signature} cannot take them ({err}). Pass the modules it takes before "
            "the batch as modules=(model, optimizer)."
        )


def scan_positions(
    context: PassContext, epoch: int, index: int, length: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Global start positions and epochs of the next ``length`` full batches from record
    ``index`` of pass ``epoch``, and the ``(epoch, index)`` standing after them; the last
    position is checked before any array is made."""
    source = context.source
    n = len(source)  # type: ignore[arg-type]
    lo = source.shard.bounds(n)[0]
    batch = context.plan.batch_size
    size = source.epoch_size() or 0
    per_pass = size // batch  # full batches of a pass
    if per_pass == 0:
        raise ConfigError(
            f"Pipeline.scan runs full batches, but an epoch of {type(source).__name__} "
            f"holds {count_words(size, 'record')}, fewer than batch_size={batch}."
        )
    here = max(0, (size - index) // batch)  # full batches left in this pass
    later = length - 1 - here  # the last step's steps into the passes after this one
    last_epoch, last_index = ((epoch, index + (length - 1) * batch) if later < 0
                              else (epoch + 1 + later // per_pass, later % per_pass * batch))
    end = last_epoch * n + lo + last_index + batch
    dtype = np.dtype(position_dtype())
    if end > np.iinfo(dtype).max:
        raise OverflowError(
            f"Pipeline.scan length={length} would run to epoch {last_epoch} of a {n}-record "
            f"source, whose global record positions pass {np.iinfo(dtype).max}, the largest "
            f"{dtype.name} holds; scan fewer steps per call"
            + (" (or enable jax_enable_x64)." if dtype == np.int32 else ".")
        )
    steps = np.arange(length, dtype=np.int64)
    later_steps = steps - here
    epochs = np.where(steps < here, epoch, epoch + 1 + later_steps // per_pass)
    indices = np.where(steps < here, index + steps * batch, later_steps % per_pass * batch)
    starts = epochs * n + lo + indices
    return (starts.astype(position_dtype()), epochs.astype(np.int32),
            (last_epoch, last_index + batch))


def scan_program(
    train_step: Callable[..., Any], batch_size: int, placement: Any,
    modules_def: Any, data_def: Any,
) -> Any:
    """The compiled ``(module state, data state, inputs, starts, epochs, key) -> (module
    state, outputs)``, cached by graph definitions, step, batch size and placement. The
    data's state goes in only, so a second call keeps the input types of the first."""

    def build() -> Any:
        def run(modules_state: Any, data_state: Any, inputs: Any, starts: Any, epochs: Any,
                key: Any) -> Any:
            source, stages = nnx.merge(data_def, data_state)

            def body(state: Any, position: Any) -> tuple[Any, Any]:
                start, epoch = position
                batch, _ = indexed_batch(source, stages, inputs, start, epoch, key, batch_size)
                if placement is not None:
                    batch = {name: placement.constrain(value) for name, value in batch.items()}
                modules = nnx.merge(modules_def, state)
                out = train_step(*modules, batch)
                return nnx.state(modules), out

            return jax.lax.scan(body, modules_state, (starts, epochs))

        return jax.jit(run)

    return cached(("scan", modules_def, data_def, train_step, batch_size, placement), build)


def _on_mesh(state: Any, placement: Any) -> Any:
    """The modules' ``state`` put replicated on the placement's mesh where not yet there
    (so a second call has the input types of the first)."""
    mesh = placement.sharding.mesh
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def put(value: Any) -> Any:
        sharding = getattr(value, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh == mesh:
            return value
        return jax.device_put(value, replicated)

    return jax.tree.map(put, state)


def _mesh_for(placement: Any) -> Any:
    """``jax.set_mesh`` of a mesh with ``Explicit`` axes where none is set: resharding to
    it inside the program needs it (an ``Auto`` mesh, or one already set, needs nothing)."""
    if placement is not None and placement.explicit and jax.sharding.get_mesh().empty:
        return jax.set_mesh(placement.sharding.mesh)
    return contextlib.nullcontext()


def _as_they_were(new: Any, old: Any) -> Any:
    """``new`` arrays on the shardings of the ``old`` ones they replace."""

    def keep(value: Any, before: Any) -> Any:
        if isinstance(value, jax.Array) and isinstance(before, jax.Array):
            if value.sharding != before.sharding:
                return jax.device_put(value, before.sharding)
        return value

    return jax.tree.map(keep, new, old)


def run_scan(
    context: PassContext, train_step: Callable[..., Any], length: int, modules: Any,
    epoch: int, index: int,
) -> Any:
    """Run ``length`` fused steps from record ``index`` of pass ``epoch``; move the source
    past them and return ``train_step``'s outputs stacked along a leading axis."""
    source = context.source
    starts, epochs, (end_epoch, end_index) = scan_positions(context, epoch, index, length)
    modules, data = tuple(modules), (source, list(context.stages))
    modules_def, modules_state = nnx.split(modules)
    data_def, data_state = split_for_step(data)
    data_state = jax.device_put(data_state)
    nnx.update(data, data_state)  # copied to the device once, not at every call
    placement = context.plan.placement
    if placement is not None:
        modules_state = _on_mesh(modules_state, placement)
    program = scan_program(train_step, context.plan.batch_size, placement, modules_def,
                           data_def)
    lengths = _CALLED.setdefault(program, set())
    with context.stats.timer("step" if length in lengths else "compile"), _mesh_for(placement):
        state, out = program(modules_state, data_state, source.step_inputs(), starts, epochs,
                             context.key_pair())
    lengths.add(length)
    state = _as_they_were(state, modules_state)

    def write_back() -> None:  # idempotent: run again whole if interrupted
        nnx.update(modules, state)
        source.seek(end_epoch, end_index)

    _through_interrupts(write_back)
    for _ in range(length):
        context.stats.count(context.plan.batch_size)
    return out


def _through_interrupts(write_back: Callable[[], None], tries: int = 3) -> None:
    """Run the idempotent ``write_back`` to its end even when a Ctrl-C lands in it (run
    again whole), then raise the interrupt: the modules' state and the position move
    together, never one without the other."""
    interrupted: KeyboardInterrupt | None = None
    for _ in range(tries):
        try:
            write_back()
            break
        except KeyboardInterrupt as err:
            interrupted = err
    if interrupted is not None:
        raise interrupted
