"""Graphs of operators: :class:`DagOperator`, branch and merge nodes, :class:`CachedPrefix`.

``Rebatch`` lives in :mod:`datarax.pipeline`.
"""

from typing import Any

from datarax.dag.cache import CachedPrefix
from datarax.dag.graph import SOURCE, plan_graph
from datarax.dag.nodes import Merge, SelectFields
from datarax.dag.operator import DagOperator

__all__ = ["SOURCE", "CachedPrefix", "DagOperator", "Merge", "SelectFields", "plan_graph"]

# Names that moved to a higher layer (dag may not import the pipeline package).
_MOVED = {"Rebatch": "datarax.pipeline", "RebatchIterator": "datarax.pipeline"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise ImportError(
            f"{name} moved from datarax.dag to {_MOVED[name]}: write "
            f"'from {_MOVED[name]} import {name}'.", name=name)
    raise AttributeError(f"module 'datarax.dag' has no attribute {name!r}")
