"""Compiled programs cached by what they are built from, in one small LRU.

**Invariant.** A program is found again only under a key equal to the one it was
built under: the key holds everything that determines it (an NNX graph definition
with its configs and functions, sizes, flags), never a hash of Python code. A key holds
no data: a graph definition is made by :func:`split_for_step`, which leaves a source's
records out (they reach the program as arguments).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

_CACHE: OrderedDict[Any, Callable[..., Any]] = OrderedDict()
_CACHE_SIZE = 64
# keys that cannot be hashed, most recent last: found by equality
_UNHASHABLE: list[tuple[Any, Callable[..., Any]]] = []
_UNHASHABLE_SIZE = 16
# the compile-ahead thread and the consumer must get the same step object
_LOCK = threading.RLock()


def cached(key: Any, build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """The step cached under ``key``, built by ``build()`` (cheap: under a lock) the first
    time; unhashable keys (a graph definition with a list attribute) are found by equality.

    Example:
        >>> def build():
        ...     return lambda: "built"
        >>> cached(("example", ["a.csv"]), build) is cached(("example", ["a.csv"]), build)
        True
    """
    with _LOCK:
        return _find(key, build)


def _find(key: Any, build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    try:
        hash(key)
    except TypeError:
        for i, (known, fn) in enumerate(_UNHASHABLE):
            if _equal(known, key):
                _UNHASHABLE.append(_UNHASHABLE.pop(i))
                return fn
        fn = build()
        _UNHASHABLE.append((key, fn))
        del _UNHASHABLE[:-_UNHASHABLE_SIZE]
        return fn
    return _cached(key, build)


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` as one bool; False where the comparison has no single answer (an
    attribute holding arrays compares element-wise)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _cached(key: Any, build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    fn = _CACHE.get(key)
    if fn is None:
        fn = build()
        _CACHE[key] = fn
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return fn


def split_for_step(tree: Any) -> tuple[Any, Any]:
    """``nnx.split(tree)`` for a cached step (``tree``: a source, or ``(source,
    stages)``): the graph definition is split from a twin whose sources (those with
    ``forget_records``) keep only their records' layout, so the cache keeps no data set
    alive; the state is ``tree``'s own. Only sources whose records reach the step as
    arguments (the leaves of the source's ``step_inputs()``) forget them; one held by a
    user's source or stage that does not pass them on is traced as constants, so its
    twin pins them (``pin_records``: its step is found for those records only).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(4)})
        >>> graphdef, state = split_for_step(src)
        >>> graphdef == nnx.split(src)[0], nnx.merge(graphdef, state).has_host_fields()
        (True, False)
    """
    return step_split(tree)[1:]


def step_split(tree: Any, last: tuple[Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """``(graphdef, step graphdef, state)``: :func:`split_for_step` with ``tree``'s own
    graph definition first; ``last``, an earlier ``(graphdef, step graphdef)``, is
    reused while ``graphdef`` equals its first (no twin is made)."""
    graphdef, state = nnx.split(tree)
    if last is not None and last[0] == graphdef:
        return graphdef, last[1], state
    if not any(hasattr(node, "forget_records") for _, node in nnx.iter_graph(tree)):
        return graphdef, graphdef, state
    source = tree[0] if isinstance(tree, tuple) else tree
    passed = {id(leaf) for leaf in jax.tree.leaves(getattr(source, "step_inputs", lambda: None)())}
    twin = nnx.merge(graphdef, state)
    for _, node in nnx.iter_graph(twin):
        if hasattr(node, "forget_records") and _passed(node, passed):
            node.forget_records()
        elif hasattr(node, "pin_records"):
            node.pin_records()
    return graphdef, nnx.split(twin)[0], state


def _passed(node: Any, passed: set[int]) -> bool:
    """Whether all of ``node``'s records are among the step's arguments (``passed``)."""
    leaves = jax.tree.leaves(node.step_inputs())
    return bool(leaves) and all(id(leaf) in passed for leaf in leaves)
