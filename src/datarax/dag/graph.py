"""``plan_graph``: check a graph of named nodes and put it in the order it runs.

``edges[name]`` lists node ``name``'s predecessors (``"source"``: the source's batch).
Nodes run in topological order, ties in the order given.

Example:
    >>> plan_graph(["b", "a", "m"], {"a": ["source"], "b": ["source"], "m": ["a", "b"]}, "m")
    ['b', 'a', 'm']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from datarax.core.errors import ConfigError

SOURCE = "source"


def plan_graph(names: Sequence[str], edges: Mapping[str, Sequence[str]], sink: str) -> list[str]:
    """The nodes in the order they run; ``ConfigError`` naming the nodes at fault."""
    known = list(names)
    if SOURCE in known:
        raise ConfigError(
            f"'{SOURCE}' is the name of the source batch in a graph; rename that node."
        )
    if not isinstance(sink, str) or sink not in known:
        raise ConfigError(f"The sink {sink!r} is not a node; the nodes are {known}.")
    for target, preds in edges.items():
        if target not in known:
            raise ConfigError(
                f"edges lists predecessors of '{target}', which is not a node; the nodes "
                f"are {known}."
            )
        if isinstance(preds, str) or not isinstance(preds, Sequence) or not preds:
            raise ConfigError(
                f"edges['{target}'] must be a non-empty list of node names (or "
                f"'{SOURCE}'), got {preds!r}."
            )
        for pred in preds:
            if pred != SOURCE and pred not in known:
                raise ConfigError(
                    f"edges['{target}'] names '{pred}', which is not a node; the nodes are "
                    f"{known} (and '{SOURCE}', the source batch)."
                )
        if len(set(preds)) != len(preds):
            raise ConfigError(f"edges['{target}'] lists a predecessor twice: {list(preds)}.")
    missing = [n for n in known if n not in edges]
    if missing:
        raise ConfigError(
            f"Nodes {missing} have no entry in edges; list each node's predecessors, e.g. "
            f"edges={{'{missing[0]}': ['{SOURCE}']}}."
        )
    order: list[str] = []
    done = {SOURCE}
    pending = list(known)
    while pending:
        ready = [n for n in pending if all(p in done for p in edges[n])]
        if not ready:
            raise ConfigError(f"The graph has a cycle: {' -> '.join(_cycle(pending, edges))}.")
        for n in ready:
            order.append(n)
            done.add(n)
        pending = [n for n in pending if n not in done]
    feeding = {sink}
    for n in reversed(order):
        if n in feeding:
            feeding.update(p for p in edges[n] if p != SOURCE)
    dead = [n for n in order if n not in feeding]
    if dead:
        raise ConfigError(
            f"Nodes {dead} do not lead to the sink '{sink}'; connect them or remove them."
        )
    return order


def _cycle(pending: list[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle among ``pending`` nodes (each waits on another pending node)."""
    waiting = set(pending)
    path: list[str] = []
    node = pending[0]
    while node not in path:
        path.append(node)
        node = next(p for p in edges[node] if p in waiting)
    return [*path[path.index(node):], node]
