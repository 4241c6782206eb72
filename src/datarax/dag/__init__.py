"""Graphs of operators: :class:`DagOperator` (``Pipeline.from_dag`` builds one) and the
nodes that split fields into branches and merge them back."""

from datarax.dag.graph import SOURCE, plan_graph
from datarax.dag.nodes import Merge, SelectFields
from datarax.dag.operator import DagOperator

__all__ = ["SOURCE", "DagOperator", "Merge", "SelectFields", "plan_graph"]
