"""Graphs of operators: :class:`DagOperator` (``Pipeline.from_dag`` builds one), the
nodes that split fields into branches and merge them back, :class:`Rebatch` (a
pipeline's batches grouped or split) and :class:`CachedPrefix` (a deterministic
prefix kept in host memory)."""

from datarax.dag.cache import CachedPrefix
from datarax.dag.graph import SOURCE, plan_graph
from datarax.dag.nodes import Merge, SelectFields
from datarax.dag.operator import DagOperator
from datarax.dag.rebatch import Rebatch, RebatchIterator

__all__ = [
    "SOURCE", "CachedPrefix", "DagOperator", "Merge", "Rebatch", "RebatchIterator",
    "SelectFields", "plan_graph",
]
