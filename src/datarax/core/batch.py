"""Helpers for batch dicts whose fields are arrays (records on axis 0), lists of str,
or nested dicts of such fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from datarax.core.dtypes import is_text_scalar
from datarax.typing import Batch


def batch_length(batch: Batch) -> int:
    """Number of records in a batch (length of its first field; 0 when empty).

    Example:
        >>> batch_length({"meta": {"id": np.zeros(3)}, "t": ["a", "b", "c"]})
        3
    """
    for value in batch.values():
        return batch_length(value) if isinstance(value, dict) else len(value)
    return 0


def take_records(batch: Batch, rows: Any) -> Batch:
    """The records at ``rows`` (integer positions) of a batch.

    Example:
        >>> take_records({"x": np.arange(4), "t": list("abcd")}, [0, 3])["t"]
        ['a', 'd']
    """
    out: Batch = {}
    for key, value in batch.items():
        if isinstance(value, dict):
            out[key] = take_records(value, rows)
        elif isinstance(value, (list, tuple)):
            out[key] = [value[int(i)] for i in rows]
        else:
            out[key] = np.asarray(value)[np.asarray(rows, dtype=np.int64)]
    return out


def head_on_host(batch: Any, count: int) -> Any:
    """The first ``count`` records of a batch, device arrays as numpy (text lists and
    nesting kept).

    Example:
        >>> head_on_host({"x": np.arange(4), "meta": {"t": ("a", "b", "c", "d")}}, 2)
        {'x': array([0, 1]), 'meta': {'t': ['a', 'b']}}
    """
    if isinstance(batch, Mapping):
        return {k: head_on_host(v, count) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return list(batch[:count])
    return np.asarray(batch)[:count]


def head_rows(array: Any, count: int) -> Any:
    """The first ``count`` records of one field of a batch; on the CPU a zero-copy view
    (no slice compiled per field and size).

    Example:
        >>> head_rows(jax.numpy.arange(4), 2).tolist(), head_rows(np.arange(4), 3).tolist()
        ([0, 1], [0, 1, 2])
    """
    if isinstance(array, jax.Array) and all(d.platform == "cpu" for d in array.devices()):
        return jax.device_put(np.asarray(array)[:count])
    return array[:count]


def gather_rows(column: Any, rows: Any) -> Any:
    """``column[rows]`` for rows known to lie in ``[0, len(column))``: traced, one gather
    without bounds handling; concrete rows take ``jnp.take``, which checks them.

    Example:
        >>> gather_rows(jax.numpy.arange(10, 15), jax.numpy.array([4, 0])).tolist()
        [14, 10]
    """
    if not isinstance(rows, jax.core.Tracer):
        return jax.numpy.take(column, rows, axis=0)
    dims = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(range(1, column.ndim)), collapsed_slice_dims=(0,),
        start_index_map=(0,))
    return jax.lax.gather(column, rows[:, None], dims, (1, *column.shape[1:]),
                          mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def concat_batches(parts: list[Batch], *, on_device: bool = False) -> Batch:
    """Join batches field by field (arrays concatenated, lists of str extended);
    ``on_device``: JAX arrays are joined with ``jnp.concatenate`` and stay on the device.

    Example:
        >>> concat_batches([{"x": np.arange(2)}, {"x": np.arange(1)}])["x"].tolist()
        [0, 1, 0]
    """
    if len(parts) == 1:
        return parts[0]
    if on_device:
        import jax.numpy as jnp  # only device joins need it; host joins stay numpy

        join: Any = jnp.concatenate
    else:
        join = lambda values: np.concatenate([np.asarray(v) for v in values])  # noqa: E731
    out: Batch = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        if all(isinstance(v, dict) for v in values):
            out[key] = concat_batches(values, on_device=on_device)
        elif any(isinstance(v, (list, tuple)) for v in values):
            # extended as a list: numpy's str dtype would drop trailing NULs
            out[key] = [item for v in values for item in v]
        else:
            out[key] = join(values)
    return out


def record_at(batch: Batch, i: int) -> Batch:
    """Record ``i`` of a batch, walking nested fields (a text field's list is one leaf).

    Example:
        >>> record_at({"x": np.arange(3), "meta": {"name": ["a", "b", "c"]}}, 1)
        {'x': np.int64(1), 'meta': {'name': 'b'}}
    """
    return {k: record_at(v, i) if isinstance(v, dict) else v[i] for k, v in batch.items()}


def stack_records(records: list[Batch]) -> Batch:
    """The batch of ``records`` (the inverse of :func:`record_at`): text fields become
    lists of ``str``, everything else one numpy array per field.

    Example:
        >>> stack_records([{"x": 1, "t": "a"}, {"x": 2, "t": "b"}])
        {'x': array([1, 2]), 't': ['a', 'b']}
    """
    out: Batch = {}
    for key in records[0]:
        values = [r[key] for r in records]
        if all(isinstance(v, dict) for v in values):
            out[key] = stack_records(values)
        elif all(is_text_scalar(v) for v in values):  # numpy's str_ made a plain str
            out[key] = [str(v) if isinstance(v, str) else v for v in values]
        else:
            out[key] = np.stack([np.asarray(v) for v in values])
    return out
