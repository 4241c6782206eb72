"""Global batches: per-process batches assembled into globally sharded ``jax.Array``s.

No data leaves its process (``jax.make_array_from_process_local_data``).

Example (one process; with several, every process runs the same code):
    >>> import numpy as np
    >>> mesh = data_mesh()
    >>> batch = global_batch({"x": np.arange(4, dtype=np.int32)}, mesh)
    >>> batch["x"].shape, tuple(batch["x"].sharding.spec)
    ((4,), ('data',))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datarax.core.errors import ConfigError
from datarax.sharding.placement import BatchPlacement
from datarax.typing import Batch


def data_mesh(axis_name: str = "data", devices: Sequence[Any] | None = None) -> Mesh:
    """A 1-D mesh named ``axis_name`` over ``devices`` (default: every device of every process)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ConfigError("data_mesh got no devices.")
    return Mesh(np.asarray(devices), (axis_name,))


def global_batch(
    local_batch: Mapping[str, Any],
    mesh: Mesh,
    *,
    axis: str | None = None,
) -> Batch:
    """This process's batch (the same fields and record count on every process) as global
    arrays of shape ``(local_rows * process_count, ...)``, the batch axis split over mesh
    axis ``axis`` (default: the first; other axes replicate). Text fields stay per process.

    Raises:
        ConfigError: an unknown axis, a local batch that does not split evenly over
            this process's devices, or a field that is a plain list of numbers.
    """
    axis = mesh.axis_names[0] if axis is None else axis
    if axis not in mesh.axis_names:
        raise ConfigError(f"global_batch: mesh has axes {list(mesh.axis_names)}, not {axis!r}.")
    _refuse_number_lists(local_batch, "global_batch")
    placement = BatchPlacement(NamedSharding(mesh, PartitionSpec(axis)))
    return placement.place(local_batch, "global_batch")


def _refuse_number_lists(batch: Mapping[str, Any], where: str) -> None:
    """Refuse a plain list of numbers: lists stay on the host, so it would come back unplaced."""
    for name, value in batch.items():
        if isinstance(value, Mapping):
            _refuse_number_lists(value, f"{where}, field '{name}'")
        elif isinstance(value, list) and value and all(
                isinstance(v, (bool, int, float, np.bool_, np.number)) for v in value):
            shown = value[:3] + (["..."] if len(value) > 3 else [])
            raise ConfigError(
                f"{where}: field '{name}' is a list of numbers ({', '.join(map(str, shown))}); a "
                "list stays on the host as it is (text, records of uneven shapes), so it would "
                "not be placed. Give an array of the dtype you mean, e.g. "
                f"np.asarray(batch['{name}'], np.int32).")


def global_batches(
    batches: Iterable[Mapping[str, Any]], mesh: Mesh, *, axis: str | None = None
) -> Iterator[Batch]:
    """:func:`global_batch` applied to each batch of an iterable (e.g. a Pipeline epoch)."""
    for batch in batches:
        yield global_batch(batch, mesh, axis=axis)
