"""The device side of a Pipeline: where its stages run, and where its batches go.

``stages_on``: where the compiled step runs (docs/devices.md, "Where stages run").
``sharding``: resolved once to a :class:`~datarax.sharding.placement.BatchPlacement`,
refusing batch sizes that cannot split over the devices; every batch is placed as it
is prepared, so prefetched batches wait on the devices.

Example:
    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh, PartitionSpec
    >>> mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    >>> placement_for((mesh, PartitionSpec("data")), batch_size=4, last_records=10).batch_axes
    ('data',)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import jax

from datarax.core.errors import ConfigError
from datarax.host.counts import count_words
from datarax.pipeline.state import settings
from datarax.sharding.agreement import check_same_everywhere, refuse_everywhere
from datarax.sharding.placement import BatchPlacement

if TYPE_CHECKING:
    from datarax.pipeline.plan import PassContext, PipelinePlan
    from datarax.pipeline.stats import PipelineStats


#: where a pipeline's stages may run (``Pipeline(stages_on=...)``)
STAGES_ON = ("device", "host")


def check_stages_on(stages_on: Any) -> str:
    """``stages_on`` checked: ``"device"`` or ``"host"``.

    >>> check_stages_on("host")
    'host'
    """
    if not isinstance(stages_on, str) or stages_on not in STAGES_ON:
        raise ConfigError(
            f"Pipeline stages_on must be 'device' (the stages run on JAX's default device, "
            f"the accelerator) or 'host' (they run on the host CPU and each batch is moved "
            f"to the device after), got {stages_on!r}."
        )
    return stages_on


def stage_device(plan: PipelinePlan) -> Any:
    """The device the compiled steps run on: the first CPU device for
    ``stages_on="host"``, else None (JAX's default).

    >>> from datarax.pipeline.plan import PipelinePlan
    >>> plan = PipelinePlan(4, False, 0, False, stages_on="host")
    >>> stage_device(plan).platform
    'cpu'
    """
    if plan.stages_on != "host":
        return None
    return jax.local_devices(backend="cpu")[0]


def default_device() -> Any:
    """The device a batch without ``sharding=`` goes to (this thread's default)."""
    chosen = jax.config.jax_default_device
    if chosen is None:
        return jax.devices()[0]
    if isinstance(chosen, str):
        return jax.devices(chosen)[0]
    return chosen


def stage_context(plan: PipelinePlan) -> Any:
    """A context in which eagerly run stages create their arrays on :func:`stage_device`."""
    device = stage_device(plan)
    return contextlib.nullcontext() if device is None else jax.default_device(device)


def stage_mesh(plan: PipelinePlan) -> Any:
    """A context with no mesh in force for ``stages_on="host"``: a ``jax.set_mesh`` of the
    loop names the accelerators, and the steps run on the CPU (batches are placed by
    ``sharding=`` or on the default device, neither reading the mesh)."""
    if plan.stages_on != "host" or jax.sharding.get_abstract_mesh().empty:
        return contextlib.nullcontext()
    return jax.set_mesh(None)


def placement_for(sharding: Any, batch_size: int, last_records: int | None) -> BatchPlacement:
    """Resolve ``sharding`` and check that every batch splits over the local devices.

    Args:
        sharding: ``NamedSharding`` or ``(Mesh, PartitionSpec)``.
        batch_size: the pipeline's (per-process) batch size.
        last_records: records one epoch serves when its short last batch is kept
            (None: the last batch is dropped, or the length is unknown).

    Raises:
        ConfigError: a bad sharding, a batch size that does not divide by this
            process's devices on the batch axes, or a short last batch that would not.
    """
    placement = BatchPlacement.of(sharding)
    split = placement.local_split
    devices = count_words(split, "device")
    if batch_size % split:
        raise ConfigError(
            f"Pipeline batch_size={batch_size} does not split over this process's {devices} "
            f"on mesh axes {list(placement.batch_axes)}; use a batch size divisible by {split}."
        )
    last = None if last_records is None else last_records % batch_size
    if last is not None and last % split:
        raise ConfigError(
            f"Pipeline sharding: the last batch of each epoch holds "
            f"{count_words(last, 'record')} ({last_records} in this shard), which "
            f"{'does' if last == 1 else 'do'} not split over this process's {devices}; "
            "set drop_remainder=True."
        )
    return placement


def check_processes_agree(context: PassContext) -> None:
    """Under several processes with ``sharding=``, refuse a pipeline built otherwise on
    another process (mismatched shares, or a collective waiting forever)."""
    if context.plan.placement is None or jax.process_count() == 1:
        return
    mine = settings(context)
    mine["shard"] = mine["shard"][1]  # the count must agree; the index is the process's
    check_same_everywhere(mine, "Pipeline(sharding=...) under several processes")


@contextlib.contextmanager
def refusal_shared(sharding: Any) -> Iterator[None]:
    """Building a pipeline with ``sharding=`` under several processes: an error raised on
    this process before :func:`check_processes_agree` is handed to the other processes,
    which wait for this one there (else forever, or until an opaque collective timeout)."""
    if sharding is None or jax.process_count() == 1:
        yield
        return
    try:
        yield
    except Exception as error:
        with contextlib.suppress(RuntimeError):  # the others are gone: this error says more
            refuse_everywhere(error)
        raise


def place_batch(
    plan: PipelinePlan, stats: PipelineStats, batch: dict[str, Any], position: int, epoch: int
) -> dict[str, Any]:
    """``batch`` placed with ``sharding=``, or, for stages run on the host, moved to the
    default device (timed as ``transfer``); else unchanged."""
    if plan.placement is not None:
        with stats.timer("transfer"):
            return plan.placement.place(batch, f"batch at record {position} of epoch {epoch}")
    if plan.stages_on != "host":
        return batch
    with stats.timer("transfer"):
        target = default_device()
        return jax.tree.map(
            lambda v: jax.device_put(v, target) if isinstance(v, jax.Array) else v,
            batch, is_leaf=lambda v: isinstance(v, list),
        )
