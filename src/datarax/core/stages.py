"""Running a pipeline's stages over one batch: the one loop every path shares.

A stochastic stage gets one key per record, ``record_keys(stage_key, epoch, indices)``;
a deterministic one ``None``. Filters take no key position, so adding or moving one
leaves every other stage's keys alone. Every path calls :func:`apply_stages`, so a record
is transformed the same way whichever serves it.

Example:
    >>> import jax, numpy as np
    >>> from datarax.operators import ElementOperator
    >>> double = ElementOperator(fn=lambda el, key=None: el.update_data({"x": el.data["x"] * 2}))
    >>> out = apply_stages([double], {"x": np.arange(3)}, np.arange(3), 0, jax.random.key(0))
    >>> out["x"].tolist()
    [0, 2, 4]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from datarax.core.errors import ConfigError, DataraxError, callable_name
from datarax.core.keys import StepKeys, fold_in_rows, record_keys, stage_record_keys
from datarax.core.operator import OperatorModule, RecordFilter, call_stage
from datarax.host.counts import count_words
from datarax.typing import Batch


def filtered(batch: Batch) -> Batch:
    """Stands where a filter stood, keeping stage indices; takes no key position."""
    return batch


def apply_stages(
    stages: Sequence[Any], batch: Batch, indices: Any, epoch: Any, pipeline_key: Any
) -> Batch:
    """Run every stage over ``batch``; stochastic stages get per-record keys.

    Stage ``i`` without its own ``rngs`` uses ``fold_in(pipeline_key, i + 1 - f)``,
    ``f`` the filters before it. ``pipeline_key`` may be a pass's
    :class:`~datarax.core.keys.StepKeys`: the same keys, less threefry work.
    """
    shared = _shared_keys(stages, indices, epoch, pipeline_key)
    if isinstance(pipeline_key, StepKeys):
        pipeline_key = jax.random.wrap_key_data(pipeline_key.pipeline)
    position = 0  # the key position: stages counted from 1, filters left out
    for index, stage in enumerate(stages):
        where = f"Pipeline stage {index}"
        is_filter = stage is filtered or isinstance(stage, RecordFilter)
        if not is_filter:
            position += 1
        records = None if is_filter else _records(batch)
        if isinstance(stage, OperatorModule):
            keys = None
            if stage.stochastic:
                keys = shared.get(position)
                if keys is None:  # its own rngs: its own base key
                    keys = record_keys(stage.stage_key(pipeline_key, position), epoch, indices)
            try:
                out = call_stage(stage, lambda: stage.apply_batch(batch, keys), where)
            except (TypeError, AttributeError) as err:
                if keys is None and _needs_a_key(stage, batch, err):
                    raise _not_stochastic_error(stage, index) from err
                raise
            batch = out
        else:
            batch = call_stage(stage, lambda: stage(batch), where)
        if not isinstance(batch, dict):
            name = getattr(stage, "name", None) or callable_name(stage)
            raise TypeError(
                f"Pipeline stage {index} ({name}) returned {type(batch).__name__}; stages must "
                "return a dict of fields: a plain callable gets the whole batch and returns "
                "it, e.g. lambda batch: {**batch, 'y': batch['x'] * 2}."
            )
        _check_records(stage, index, records, batch)
    return batch


def stage_positions(stages: Sequence[Any]) -> int:
    """How many key positions ``stages`` take (the stages that are not filters)."""
    return len(_positions(stages))


def _positions(stages: Sequence[Any]) -> list[tuple[int, Any]]:
    """``(key position, stage)`` of every stage that is not a filter."""
    out, position = [], 0
    for stage in stages:
        if not (stage is filtered or isinstance(stage, RecordFilter)):
            position += 1
            out.append((position, stage))
    return out


def _shared_keys(stages: Sequence[Any], indices: Any, epoch: Any, pipeline_key: Any) -> dict:
    """``{position: keys}`` of the stochastic stages drawing from the pipeline's key."""
    positions = [p for p, stage in _positions(stages) if isinstance(stage, OperatorModule)
                 and stage.stochastic and not stage.owns_key]
    if not positions:
        return {}
    if isinstance(pipeline_key, StepKeys):  # fold_in(row, index), one threefry evaluation
        data = fold_in_rows(pipeline_key.stages[np.asarray(positions) - 1], indices)
        return {p: jax.random.wrap_key_data(data[i]) for i, p in enumerate(positions)}
    keys = stage_record_keys(pipeline_key, positions, epoch, indices)
    return {p: keys[i] for i, p in enumerate(positions)}


def _leading_sizes(batch: Batch) -> list[int]:
    """The leading (record) axis of every field that has one; text lists count."""
    leaves = jax.tree.leaves(batch, is_leaf=lambda v: isinstance(v, list))
    return [len(v) if isinstance(v, list) else int(v.shape[0])
            for v in leaves if isinstance(v, list) or len(getattr(v, "shape", ())) >= 1]


def _records(batch: Batch) -> int | None:
    sizes = _leading_sizes(batch)
    return sizes[0] if sizes else None


def _check_records(stage: Any, index: int, records: int | None, out: Batch) -> None:
    """Refuse a stage that changed how many records the batch holds (naming it)."""
    if records is None:
        return
    other = sorted(set(_leading_sizes(out)) - {records})
    if other:
        name = (f"{type(stage).__name__} '{stage.name}'" if isinstance(stage, OperatorModule)
                else callable_name(stage))
        raise DataraxError(
            f"Pipeline stage {index} ({name}) was given a batch of "
            f"{count_words(records, 'record')} and "
            f"returned fields with {other[0]} along the first axis; a stage maps each record "
            "to one record. Drop records with FilterOperator, and turn one record into "
            "several with FlatMapSource."
        )


def _needs_a_key(stage: OperatorModule, batch: Batch, err: BaseException) -> bool:
    """Whether ``stage`` failed on the ``None`` key (the call succeeds with real keys)."""
    if "NoneType" not in str(err):
        return False
    leaves = jax.tree.leaves(batch, is_leaf=lambda v: isinstance(v, list))
    if not leaves:
        return False
    first = leaves[0]
    size = len(first) if isinstance(first, list) else int(first.shape[0])
    keys = record_keys(jax.random.key(0), 0, jax.numpy.arange(size))
    try:
        stage.apply_batch(batch, keys)
    except Exception:  # noqa: BLE001 - it fails for another reason: not a key problem
        return False
    return True


def _not_stochastic_error(stage: OperatorModule, index: int) -> ConfigError:
    """The error for a deterministic stage ``index`` that uses its key."""
    config = type(stage.config).__name__
    return ConfigError(
        f"Pipeline stage {index} ({type(stage).__name__} '{stage.name}') uses its random key, but "
        f"it was built with stochastic=False, so its function gets key=None. Build it with "
        f"{config}(stochastic=True) to give each record its own key."
    )
