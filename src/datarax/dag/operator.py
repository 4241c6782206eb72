"""``DagOperator``: a graph of operators run as one pipeline stage.

Node ``i`` (its place in ``nodes``) draws from ``fold_in(record_key, i)``: two nodes
applying the same augmentation draw different views, the same at any batch size or resume
point. Nodes therefore take no ``rngs`` of their own.

Example:
    >>> import jax.numpy as jnp
    >>> from datarax.operators import ElementOperator, ElementOperatorConfig
    >>> def double(e, key=None):
    ...     return e.update_data({"x": e.data["x"] * 2})
    >>> op = lambda: ElementOperator(ElementOperatorConfig(), fn=double)
    >>> dag = DagOperator(nodes={"a": op(), "b": op(), "m": Merge()},
    ...                   edges={"a": ["source"], "b": ["a"], "m": ["a", "b"]}, sink="m")
    >>> out = dag.apply_batch({"x": jnp.arange(3)}, None)
    >>> out["a_x"].tolist(), out["b_x"].tolist()
    ([0, 2, 4], [0, 4, 8])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flax import nnx

from datarax.core.config import StructuralConfig, check_bool
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.keys import child_keys
from datarax.core.operator import (
    OperatorModule,
    RecordFilter,
    all_per_record,
    call_stage,
    refuse_rng_state,
)
from datarax.dag.graph import SOURCE, plan_graph
from datarax.dag.nodes import Merge, join_fields
from datarax.typing import Batch

Node = OperatorModule | Callable[[Batch], Batch]


@dataclass(frozen=True)
class DagConfig(StructuralConfig):
    """The graph's wiring (names, predecessors, sink) and whether any node is stochastic."""

    names: tuple[str, ...] = ()
    edges: tuple[tuple[str, tuple[str, ...]], ...] = ()
    sink: str = ""
    stochastic: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "stochastic")


class DagOperator(OperatorModule):
    """Run ``nodes`` wired by ``edges`` and hand out ``sink``'s output; see the module docstring.

    Args:
        nodes: ``{name: operator or callable(batch) -> batch}``.
        edges: ``{name: [predecessor names]}`` for every node; ``"source"`` is the
            batch the source hands out.
        sink: the node whose output the stage returns.

    Raises:
        ConfigError: a bad graph (:func:`~datarax.dag.graph.plan_graph`), a filter node,
            or a node with its own ``rngs``.
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        edges: Mapping[str, Sequence[str]],
        sink: str,
        *,
        name: str | None = None,
    ) -> None:
        if not isinstance(nodes, Mapping) or not nodes:
            got = "{}" if isinstance(nodes, Mapping) else f"a {type(nodes).__name__}"
            raise ConfigError(f"DagOperator nodes must be a non-empty dict {{name: operator}}, got {got}.")
        if not isinstance(edges, Mapping):
            raise ConfigError(
                f"DagOperator edges must be a dict {{name: [predecessors]}}, got a {type(edges).__name__}."
            )
        bad = [n for n in nodes if not isinstance(n, str)]
        if bad:
            raise ConfigError(
                f"DagOperator node names must be strings (edges and sink name them), got "
                f"{bad[0]!r} ({type(bad[0]).__name__})."
            )
        names = list(nodes)
        order = plan_graph(names, edges, sink)
        for node_name, node in nodes.items():
            if isinstance(node, type):
                raise ConfigError(
                    f"DagOperator node '{node_name}' is the class {node.__name__}, not an "
                    f"operator: build it first, e.g. {node.__name__}(...) with its settings."
                )
            refuse_rng_state(node, f"DagOperator node '{node_name}'")
            if isinstance(node, RecordFilter):
                raise ConfigError(
                    f"DagOperator node '{node_name}' is a {type(node).__name__}; every node of "
                    "a graph maps each record to one record, so its branches stay aligned. "
                    "Put the filter in the Pipeline's stages, before or after the graph: "
                    "Pipeline(source, stages=[filter, DagOperator(nodes, edges, sink)])."
                )
            if isinstance(node, OperatorModule):
                if node.owns_key:
                    raise ConfigError(
                        f"DagOperator node '{node_name}' was built with its own rngs; nodes "
                        "of a graph draw from the graph's per-record keys. Build it without rngs."
                    )
            elif not callable(node):
                raise ConfigError(
                    f"DagOperator node '{node_name}' is {type(node).__name__}, neither an "
                    "operator module nor a callable taking and returning a batch dict."
                )
        stochastic = any(isinstance(n, OperatorModule) and n.stochastic for n in nodes.values())
        config = DagConfig(
            names=tuple(names),
            edges=tuple((n, tuple(edges[n])) for n in names),
            sink=sink,
            stochastic=stochastic,
        )
        super().__init__(config, name=name or f"Dag[{', '.join(order)} -> {sink}]")
        self.nodes = nnx.Dict({n: node for n, node in nodes.items()})
        self.order = tuple(order)
        self.per_record = all_per_record(nodes.values())

    @classmethod
    def chain(cls, stages: Sequence[Node], *, name: str | None = None) -> DagOperator:
        """The linear pipeline ``stages[0] -> stages[1] -> ...`` as a graph."""
        if isinstance(stages, (OperatorModule, str)) or not isinstance(stages, Sequence) or not stages:
            raise ConfigError(
                "DagOperator.chain needs a non-empty list of stages, got "
                f"{'[]' if isinstance(stages, Sequence) and not stages else type(stages).__name__}; "
                "wrap a single stage in a list: DagOperator.chain([op])."
            )
        names = [f"stage{i}" for i in range(len(stages))]
        edges = {n: [SOURCE if i == 0 else names[i - 1]] for i, n in enumerate(names)}
        return cls(dict(zip(names, stages)), edges, names[-1], name=name)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Run every node in order over ``data``; the sink's output."""
        outputs: dict[str, Batch] = {SOURCE: dict(data)}
        edges = dict(self.config.edges)
        position = {n: i for i, n in enumerate(self.config.names)}
        for node_name in self.order:
            node = self.nodes[node_name]
            preds = edges[node_name]
            if isinstance(node, Merge):
                out = node.merge({p: outputs[p] for p in preds})
            else:
                if len(preds) == 1:
                    batch = dict(outputs[preds[0]])
                else:
                    batch = join_fields({p: outputs[p] for p in preds}, "{field}", f"node '{node_name}'")
                where = f"DagOperator node '{node_name}'"
                if isinstance(node, OperatorModule):
                    node_keys = child_keys(keys, position[node_name]) if node.stochastic else None
                    out = call_stage(node, lambda: node.apply_batch(batch, node_keys), where)
                else:
                    out = call_stage(node, lambda: node(batch), where)
            if not isinstance(out, dict):
                raise DataraxError(
                    f"DagOperator node '{node_name}' returned {type(out).__name__}; nodes must "
                    "return a dict of fields."
                )
            outputs[node_name] = out
        return outputs[self.config.sink]
