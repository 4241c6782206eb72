"""Pipeline state in Orbax checkpoints, next to the model state.

The data state (``pipeline.get_state()``, ``iterator.get_state()`` or
``source.get_state()``) is a small JSON dict; it goes into an Orbax
``CheckpointManager`` step as one more item of an ``ocp.args.Composite``, saved with
``ocp.args.JsonSave`` and read back with ``ocp.args.JsonRestore``. Model and data
are then always saved and restored together, at the same step.

Example:
    >>> import tempfile, numpy as np, orbax.checkpoint as ocp
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> def make():
    ...     src = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    ...     return Pipeline(source=src, stages=[], batch_size=2, rngs=nnx.Rngs(0))
    >>> pipeline, directory = make(), tempfile.mkdtemp()
    >>> it = iter(pipeline); _ = next(it)
    >>> with ocp.CheckpointManager(directory) as manager:
    ...     save(manager, 1, pipeline)
    True
    >>> fresh = make()
    >>> with ocp.CheckpointManager(directory) as manager:
    ...     _ = restore(manager, 1, fresh)
    >>> [b["x"].tolist() for b in fresh]
    [[2, 3], [4, 5]]
"""

from __future__ import annotations

from typing import Any, Protocol

from datarax.core.errors import StateError
from datarax.core.extras import require

# Orbax is the `checkpoint` extra: a missing install says which pip command adds it.
ocp = require("orbax.checkpoint", extra="checkpoint", user="datarax.checkpoint")

DATA_ITEM = "data"


class Stateful(Protocol):
    """Anything with ``get_state()`` / ``set_state(state)``: Pipeline, iterator, source."""

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


def data_save_args(data: Stateful) -> ocp.args.JsonSave:
    """``ocp.args.JsonSave`` of ``data.get_state()``, for a ``Composite`` item."""
    return ocp.args.JsonSave(data.get_state())


def data_restore_args() -> ocp.args.JsonRestore:
    """``ocp.args.JsonRestore()``, for the data item of a restoring ``Composite``."""
    return ocp.args.JsonRestore()


def restore_data(data: Stateful, state: Any) -> None:
    """``data.set_state(state)`` for a state read back from a checkpoint."""
    if not isinstance(state, dict):
        raise StateError(
            f"the checkpoint's '{DATA_ITEM}' item holds {type(state).__name__}, not the "
            "state dict get_state() returned; was it saved with datarax.checkpoint.save?",
            field=DATA_ITEM,
        )
    data.set_state(state)


def save(
    manager: ocp.CheckpointManager,
    step: int,
    data: Stateful,
    /,
    *,
    force: bool = False,
    **items: Any,
) -> bool:
    """Save ``data``'s state as item ``"data"`` plus ``items`` (Orbax ``CheckpointArgs``).

    ``items`` are e.g. ``model=ocp.args.StandardSave(nnx.state(model))``. Returns what
    ``manager.save`` returns (whether a checkpoint was written at this step). The save
    may be asynchronous; call ``manager.wait_until_finished()`` before exiting.
    """
    if DATA_ITEM in items:
        raise ValueError(f"item name '{DATA_ITEM}' is taken by the data state")
    args = ocp.args.Composite(**{DATA_ITEM: data_save_args(data)}, **items)
    return bool(manager.save(step, args=args, force=force))


def restore(
    manager: ocp.CheckpointManager,
    step: int | None,
    data: Stateful,
    /,
    **items: Any,
) -> Any:
    """Restore step ``step`` (None: the latest): ``data``'s state plus ``items``.

    ``items`` are e.g. ``model=ocp.args.StandardRestore(abstract_state)``. The data
    state is restored into ``data`` (``set_state``); the returned Orbax ``Composite``
    holds every item by name (``restored.model``, ``restored.data``).
    """
    if step is None:
        step = manager.latest_step()
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {manager.directory}")
    if DATA_ITEM in items:
        raise ValueError(f"item name '{DATA_ITEM}' is taken by the data state")
    args = ocp.args.Composite(**{DATA_ITEM: data_restore_args()}, **items)
    restored = manager.restore(step, args=args)
    restore_data(data, restored[DATA_ITEM])
    return restored
