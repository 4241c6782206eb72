"""Graphs of operators: :class:`DagOperator` (``Pipeline.from_dag`` builds one), the
nodes that split fields into branches and merge them back, and :class:`Rebatch`
(a pipeline's batches grouped or split)."""

from datarax.dag.graph import SOURCE, plan_graph
from datarax.dag.nodes import Merge, SelectFields
from datarax.dag.operator import DagOperator
from datarax.dag.rebatch import Rebatch, RebatchIterator

__all__ = [
    "SOURCE", "DagOperator", "Merge", "Rebatch", "RebatchIterator", "SelectFields",
    "plan_graph",
]
