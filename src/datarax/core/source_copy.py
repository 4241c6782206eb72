"""``copy.deepcopy`` of a data source or a pipeline: an independent copy at the same
position, the one ``nnx.clone`` makes.

NNX's own ``deepcopy`` copies the graph definition without the memo (a source whose
bookkeeping points back at it recurses without end) and cannot copy a pipeline's
threads and locks. Here the static structure is shared, as ``nnx.clone`` does, the
Variables deep-copied, and every data source gets its own copy of its static Python
attributes (with the memo). What cannot be copied as data is named in
``rebuilt_on_copy`` and built by ``rebuild_after_copy(memo)``.
"""

from __future__ import annotations

import copy
from typing import Any

from flax import nnx

from datarax.core.errors import ConfigError


def deepcopy_module(module: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(module)`` of a data source or a pipeline; its modules and Variables
    go into ``memo``, so a structure holding a pipeline and its source copies consistently.

    Example:
        >>> import copy
        >>> import numpy as np
        >>> from datarax.sources import MemorySourceConfig
        >>> from datarax.sources.random_access import RandomAccessSource
        >>> class Rows(RandomAccessSource):
        ...     def __len__(self):
        ...         return 6
        ...     def read_records(self, indices):
        ...         return [{"x": np.int32(i)} for i in indices]
        >>> src = Rows(MemorySourceConfig())
        >>> first = src.get_batch(2)
        >>> twin = copy.deepcopy(src)
        >>> twin.get_batch(2)["x"].tolist(), src.get_batch(2)["x"].tolist()
        ([2, 3], [2, 3])
        >>> twin.close(); src.get_batch(2)["x"].tolist()
        [4, 5]
        >>> src.close()
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources import MemorySource
        >>> p = Pipeline(source=MemorySource(MemorySourceConfig(), {"x": np.arange(5)}),
        ...              batch_size=2)
        >>> it = iter(p); first = next(it)
        >>> [b["x"].tolist() for b in copy.deepcopy(p)], next(it)["x"].tolist()
        ([[2, 3], [4]], [2, 3])
    """
    graphdef, state = nnx.split(module)
    twin = nnx.merge(graphdef, copy.deepcopy(state, memo))
    own_host_parts(module, twin, memo)
    return twin


def own_host_parts(original: Any, twin: Any, memo: dict[int, Any]) -> None:
    """After ``twin = nnx.merge(graphdef, copied state)`` of ``original``: map each node
    to its twin in ``memo``, then give every data source of ``twin`` its own static
    attributes and call its ``rebuild_after_copy``."""
    pairs = [(node, copied) for (_, node), (_, copied)
             in zip(nnx.iter_graph(original), nnx.iter_graph(twin), strict=True)
             if isinstance(node, (nnx.Pytree, nnx.Variable))]
    for node, copied in pairs:
        memo[id(node)] = copied
    graph_ids = {id(node) for node, _ in pairs}
    sources = [(node, copied) for node, copied in pairs
               if isinstance(node, nnx.Pytree) and hasattr(type(node), "rebuilt_on_copy")]
    for node, copied in sources:
        _copy_static(node, copied, memo, graph_ids)
    for _, copied in sources:
        after = getattr(copied, "rebuild_after_copy", None)
        if callable(after):
            after(memo)


def _copy_static(node: Any, copied: Any, memo: dict[int, Any], graph_ids: set[int]) -> None:
    """Give ``copied`` its own copy of each plain Python attribute of ``node``."""
    rebuilt = type(node).rebuilt_on_copy
    for key, value in vars(node).items():
        if key in rebuilt:
            continue  # the copy's rebuild_after_copy(memo) builds its own
        if key.startswith("_pytree__") or key.startswith("_object__") or id(value) in graph_ids:
            continue
        if isinstance(value, (nnx.Variable, nnx.Pytree)) or _holds_graph(value, graph_ids):
            continue  # NNX rebuilt it from the graph definition and the copied state
        try:
            mine = copy.deepcopy(value, memo)
        except (TypeError, copy.Error) as err:
            raise ConfigError(
                f"copy.deepcopy({type(node).__name__}): its attribute {key!r} "
                f"({type(value).__name__}) cannot be copied ({err}). Keep what a pass "
                "reads from in a form that can be rebuilt (e.g. build the iterator in "
                "restart/get_batch from Variables), or copy the source with "
                "source.get_state() into a new source's set_state()."
            ) from err
        object.__setattr__(copied, key, mine)


def _holds_graph(value: Any, graph_ids: set[int]) -> bool:
    """A list, tuple or dict holding modules of the graph (NNX rebuilt it)."""
    if isinstance(value, (list, tuple)):
        return any(id(v) in graph_ids or _holds_graph(v, graph_ids) for v in value)
    if isinstance(value, dict):
        return any(id(v) in graph_ids or _holds_graph(v, graph_ids) for v in value.values())
    return False


__all__ = ["deepcopy_module", "own_host_parts"]
