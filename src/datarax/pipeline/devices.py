"""The device side of a Pipeline: checking ``sharding=`` against the batch geometry.

``Pipeline(..., sharding=...)`` resolves its argument to a
:class:`~datarax.sharding.placement.BatchPlacement` here, once, and refuses a batch
size that cannot split over this process's devices before any record is read. The
iterator then places every batch as it is prepared (so ``prefetch`` batches wait
already on the devices): indexed sources right after their compiled step, host
sources in place of the plain host→device copy.

Example:
    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh, PartitionSpec
    >>> mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    >>> placement_for((mesh, PartitionSpec("data")), batch_size=4, last_records=10).batch_axes
    ('data',)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from datarax.core.errors import ConfigError
from datarax.sharding.placement import BatchPlacement

if TYPE_CHECKING:
    from datarax.pipeline.plan import PipelinePlan
    from datarax.pipeline.stats import PipelineStats


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
    if batch_size % split:
        raise ConfigError(
            f"Pipeline batch_size={batch_size} does not split over this process's {split} "
            f"device(s) on mesh axes {list(placement.batch_axes)}; use a batch size "
            f"divisible by {split}."
        )
    if last_records is not None and last_records % batch_size % split:
        raise ConfigError(
            f"Pipeline sharding: the last batch of each epoch holds "
            f"{last_records % batch_size} records ({last_records} in this shard), which do "
            f"not split over this process's {split} device(s); set drop_remainder=True."
        )
    return placement


def place_batch(
    plan: PipelinePlan, stats: PipelineStats, batch: dict[str, Any], position: int, epoch: int
) -> dict[str, Any]:
    """``batch`` (from record ``position`` of pass ``epoch``) placed with the pipeline's
    ``sharding=``, timed as ``transfer``; unchanged without one."""
    if plan.placement is None:
        return batch
    with stats.timer("transfer"):
        return plan.placement.place(batch, f"batch at record {position} of epoch {epoch}")
