"""Pipeline state in Orbax checkpoints, next to the model state.

The data state (``get_state()``, a small JSON dict) is one more JSON item of an Orbax
``Composite``. Orbax writes JSON from the primary process only, so under several
processes the item holds ``{"process_states": [...]}`` and each process restores its own
(on another process count, process 0's: :mod:`datarax.pipeline.state`).

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
    >>> with checkpoint_manager(directory) as checkpoints:
    ...     save(checkpoints, 1, pipeline)
    True
    >>> fresh = make()
    >>> with checkpoint_manager(directory) as checkpoints:
    ...     _ = restore(checkpoints, 1, fresh)
    >>> [b["x"].tolist() for b in fresh]
    [[2, 3], [4, 5]]
"""

from __future__ import annotations

import operator
import os
from typing import Any, Protocol

import jax

from datarax.core.errors import ConfigError, StateError
from datarax.core.extras import require
from datarax.sharding.agreement import every_process
from datarax.storage.urls import expand_user, is_remote

ocp = require("orbax.checkpoint", extra="checkpoint", user="datarax.checkpoint")

DATA_ITEM = "data"
PROCESS_STATES = "process_states"


class Stateful(Protocol):
    """Anything with ``get_state()`` / ``set_state(state)``: Pipeline, iterator, source."""

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


def checkpoint_manager(
    directory: str | os.PathLike[str], /, **options: Any
) -> ocp.CheckpointManager:
    """``ocp.CheckpointManager(directory, **options)`` with a local ``directory`` made
    absolute (Orbax saves arrays only into an absolute one); a URL is kept.

    >>> import os
    >>> options = ocp.CheckpointManagerOptions(create=False)
    >>> with checkpoint_manager("checkpoints", options=options) as m:
    ...     str(m.directory) == os.path.abspath("checkpoints")
    True
    """
    folder = expand_user(directory)
    return ocp.CheckpointManager(folder if is_remote(folder) else os.path.abspath(folder), **options)


def _check_folder(checkpoints: ocp.CheckpointManager, items: dict[str, Any]) -> None:
    """Refuse a relative folder for items beside the data (Orbax fails in a background
    thread, leaving an unfinished step)."""
    folder = os.fspath(checkpoints.directory)
    if items and not os.path.isabs(folder) and not is_remote(folder):
        raise ConfigError(
            f"Orbax saves and restores arrays only in an absolute folder, and this "
            f"CheckpointManager's is '{folder}'. Build it with "
            f"datarax.checkpoint.checkpoint_manager('{folder}', ...), which resolves the "
            f"folder, or ocp.CheckpointManager(os.path.abspath('{folder}'), ...)."
        )


def _check_arguments(
    call: str, checkpoints: ocp.CheckpointManager, step: Any, data: Any,
    items: dict[str, Any], args_kind: str
) -> int | None:
    """Refuse arguments Orbax would fail on late or vaguely (an item named ``"data"``, a
    relative folder for items); ``step`` as an int (or None)."""
    if DATA_ITEM in items:
        raise ValueError(f"item name '{DATA_ITEM}' is taken by the data state")
    form = f"datarax.checkpoint.{call}(manager, step, pipeline, **items)"
    if not (callable(getattr(data, "get_state", None)) and callable(getattr(data, "set_state", None))):
        raise ConfigError(
            f"{call}: the data argument is {type(data).__name__}, which has no "
            f"get_state()/set_state(); pass the Pipeline, iterator or source whose position "
            f"to {call}, as {form}."
        )
    for name, item in items.items():
        if not isinstance(item, ocp.args.CheckpointArgs):
            raise ConfigError(
                f"{call}: item '{name}' is {type(item).__name__}, not Orbax CheckpointArgs; "
                f"wrap it, e.g. {name}=ocp.args.{args_kind}(...) (Orbax would leave an "
                "unfinished step behind)."
            )
    if step is not None or call != "restore":
        try:
            step = operator.index(step)
        except TypeError:
            latest = " (None: the latest)" if call == "restore" else ""
            raise ConfigError(
                f"{call}: step is {type(step).__name__} {step!r:.60}, not an int step "
                f"number{latest}; the call is {form}."
            ) from None
    _check_folder(checkpoints, items)
    return step


def data_save_args(data: Stateful) -> ocp.args.JsonSave:
    """``ocp.args.JsonSave`` of ``data.get_state()``, for a ``Composite`` item (under
    several processes, every process calls it at the same step)."""
    state = data.get_state()
    if jax.process_count() > 1:
        state = {PROCESS_STATES: every_process(state, "datarax.checkpoint.save")}
    return ocp.args.JsonSave(state)


def data_restore_args() -> ocp.args.JsonRestore:
    """``ocp.args.JsonRestore()``, for the data item of a restoring ``Composite``."""
    return ocp.args.JsonRestore()


def restore_data(data: Stateful, state: Any) -> None:
    """``data.set_state(state)`` for a state read back from a checkpoint (this process's own)."""
    if not isinstance(state, dict):
        raise StateError(
            f"the checkpoint's '{DATA_ITEM}' item holds {type(state).__name__}, not the "
            "state dict get_state() returned; was it saved with datarax.checkpoint.save?",
            field=DATA_ITEM,
        )
    if PROCESS_STATES in state:
        states = state[PROCESS_STATES]
        if not (isinstance(states, list) and states and all(isinstance(s, dict) for s in states)):
            raise StateError(
                f"the checkpoint's '{DATA_ITEM}' item has '{PROCESS_STATES}' "
                f"{type(states).__name__}, not the list of every process's state dict "
                "datarax.checkpoint.save wrote; the checkpoint was tampered with.",
                field=DATA_ITEM,
            )
        own = len(states) == jax.process_count()
        state = states[jax.process_index() if own else 0]
    data.set_state(state)


def save(
    checkpoints: ocp.CheckpointManager,
    step: int,
    data: Stateful,
    /,
    *,
    force: bool = False,
    **items: Any,
) -> bool:
    """Save ``data``'s state as item ``"data"`` plus ``items`` (Orbax ``CheckpointArgs``).

    ``items`` are e.g. ``model=ocp.args.StandardSave(nnx.state(model))``; with items,
    the manager's folder must be absolute (:func:`checkpoint_manager`). Returns whether
    a checkpoint was written at this step. The save may be asynchronous: call
    ``checkpoints.wait_until_finished()`` before exiting. Every process calls it.
    """
    step = _check_arguments("save", checkpoints, step, data, items, "StandardSave")
    if jax.process_count() > 1 and not force and not checkpoints.should_save(step):
        return False  # no step written: nothing to gather from the processes
    args = ocp.args.Composite(**{DATA_ITEM: data_save_args(data)}, **items)
    return bool(checkpoints.save(step, args=args, force=force))


def restore(
    checkpoints: ocp.CheckpointManager,
    step: int | None,
    data: Stateful,
    /,
    **items: Any,
) -> Any:
    """Restore step ``step`` (None: the latest): ``data``'s state plus ``items``.

    ``items`` are e.g. ``model=ocp.args.StandardRestore(abstract_state)``. Returns the
    Orbax ``Composite`` (``restored.model``, ``restored.data``). A step not kept raises
    ``FileNotFoundError``; a step without a data item, ``StateError``.
    """
    step = _check_arguments("restore", checkpoints, step, data, items, "StandardRestore")
    if step is None:
        step = checkpoints.latest_step()
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {checkpoints.directory}")
    args = ocp.args.Composite(**{DATA_ITEM: data_restore_args()}, **items)
    try:
        restored = checkpoints.restore(step, args=args)
    except FileNotFoundError as error:
        steps = checkpoints.all_steps()
        if step in steps:
            raise
        raise FileNotFoundError(
            f"no step {step} in {checkpoints.directory}; its steps are {list(steps)} "
            "(CheckpointManagerOptions(max_to_keep=...) deletes the older ones): restore "
            "one of these, or None for the latest."
        ) from error
    except (KeyError, ValueError) as error:
        _explain_missing_data(checkpoints, step, error)
        raise
    restore_data(data, restored[DATA_ITEM])
    return restored


def _explain_missing_data(checkpoints: ocp.CheckpointManager, step: int, error: Exception) -> None:
    """Raise a StateError quoting ``error`` when the step holds no data item; else return."""
    try:
        saved = checkpoints.item_metadata(step)
    except Exception:  # noqa: BLE001 - unreadable metadata: Orbax's own error says more
        return
    if saved is not None and hasattr(saved, "keys") and DATA_ITEM in saved.keys():
        return
    said = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    raise StateError(
        f"step {step} in {checkpoints.directory} holds no '{DATA_ITEM}' item (Orbax: "
        f"{said}): it was not saved with datarax.checkpoint.save, so it has no pipeline "
        "position. Restore its items with Orbax alone (checkpoints.restore(step, args=...)) "
        "and start the data with a fresh pipeline; later steps saved with "
        "datarax.checkpoint.save restore with it.",
        field=DATA_ITEM,
    ) from error
