"""``CompositeOperatorModule``: several operators combined by one strategy.

The strategies and merges are described in docs/operators.md; child ``i`` of a stochastic
composite gets ``fold_in(record_key, i)``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError, DataraxError, first_line
from datarax.core.keys import child_keys
from datarax.core.operator import OperatorModule, all_per_record
from datarax.host.counts import count_words
from datarax.operators._records import (
    TRACER_ERRORS,
    apply_where,
    check_operators,
    check_per_record_choices,
    check_draw_settings,
    check_weights,
    child_key,
    default_name,
    float_weights,
    switch_branches,
)
from datarax.typing import Batch


class CompositionStrategy(str, enum.Enum):
    """How :class:`CompositeOperatorModule` combines its operators."""

    SEQUENTIAL = "sequential"
    CONDITIONAL_SEQUENTIAL = "conditional_sequential"
    PARALLEL = "parallel"
    WEIGHTED_PARALLEL = "weighted_parallel"
    BRANCHING = "branching"


MERGES = ("concat", "stack", "sum", "mean", "dict")


@dataclass(frozen=True)
class CompositeOperatorConfig(StructuralConfig):
    """Configuration of :class:`CompositeOperatorModule`.

    Attributes:
        strategy: a :class:`CompositionStrategy` or its value (``"sequential"``...).
        merge: how ``parallel`` merges outputs: ``concat``, ``stack``, ``sum``, ``mean``, ``dict``.
        weights: one weight per operator for ``weighted_parallel``.
        stochastic: set automatically when any child is stochastic.
        stream_name: the ``nnx.Rngs`` stream of the base key when ``rngs`` is given.
    """

    strategy: str = "sequential"
    merge: str = "stack"
    weights: tuple[float, ...] | None = None
    stochastic: bool = False
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_draw_settings(self)
        values = [s.value for s in CompositionStrategy]
        strategy = getattr(self.strategy, "value", self.strategy)
        if strategy not in values:
            raise ConfigError(
                f"CompositeOperatorConfig.strategy must be one of {values}, got {self.strategy!r}."
            )
        object.__setattr__(self, "strategy", strategy)
        if self.merge not in MERGES:
            raise ConfigError(
                f"CompositeOperatorConfig.merge must be one of {list(MERGES)}, got {self.merge!r}."
            )
        if self.weights is not None:
            object.__setattr__(self, "weights", float_weights(
                self.weights, "CompositeOperatorConfig.weights", ", one per operator"))


class CompositeOperatorModule(OperatorModule):
    """Operators combined by a :class:`CompositionStrategy` (docs/operators.md).

    Args:
        config: a :class:`CompositeOperatorConfig`, or its fields as keywords
            (``strategy="parallel", merge="sum"``).
        operators: the child operators (at least one).
        conditions: for ``conditional_sequential``, one ``condition(record) -> bool`` each.
        router: for ``branching``, ``router(record) -> int`` (clamped by ``lax.switch``;
            a float result is refused, not truncated).

    Example:
        >>> import jax.numpy as jnp
        >>> from datarax.operators.map import MapOperator, MapOperatorConfig
        >>> add = MapOperator(MapOperatorConfig(), fn=lambda a: a + 1)
        >>> dbl = MapOperator(MapOperatorConfig(), fn=lambda a: a * 2)
        >>> seq = CompositeOperatorModule(CompositeOperatorConfig(), operators=[add, dbl])
        >>> seq.apply_batch({"x": jnp.arange(3)}, None)["x"].tolist()
        [2, 4, 6]
    """

    config: CompositeOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    @property
    def per_record(self) -> bool:  # type: ignore[override]
        """Per record when every child is (a short last batch may then run padded)."""
        return all_per_record(self.operators)

    config_class = CompositeOperatorConfig

    def __init__(
        self,
        config: CompositeOperatorConfig | None = None,
        *,
        operators: Sequence[OperatorModule],
        conditions: Sequence[Callable[[Batch], Any]] | None = None,
        router: Callable[[Batch], Any] | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        owner = "CompositeOperatorModule"
        config = self.build_config(config, settings)
        ops = check_operators(operators, owner)
        strategy = config.strategy
        if strategy in ("conditional_sequential", "branching"):
            check_per_record_choices(ops, f"{owner} (strategy {strategy!r})")
        if strategy == "weighted_parallel":
            if config.weights is None:
                raise ConfigError(f"{owner}: strategy 'weighted_parallel' needs weights.")
            check_weights(config.weights, len(ops), owner)
        elif config.weights is not None:
            raise ConfigError(f"{owner}: weights apply only to 'weighted_parallel'; got strategy "
                              f"{strategy!r}. For one operator drawn per record by weight, use "
                              "SelectorOperator(operators, weights=...).")
        if strategy == "conditional_sequential":
            if conditions is None or len(conditions) != len(ops):
                got = ("no conditions" if conditions is None
                       else count_words(len(conditions), "condition"))
                raise ConfigError(
                    f"{owner}: strategy 'conditional_sequential' needs one condition per "
                    f"operator: {count_words(len(ops), 'operator')}, {got}."
                )
            if not all(callable(c) for c in conditions):
                raise ConfigError(f"{owner}: every condition must be callable.")
        elif conditions is not None:
            raise ConfigError(f"{owner}: conditions apply only to 'conditional_sequential'.")
        if strategy == "branching":
            if not callable(router):
                raise ConfigError(
                    f"{owner}: strategy 'branching' needs router=callable(record) -> int."
                )
        elif router is not None:
            raise ConfigError(f"{owner}: router applies only to 'branching'.")
        if any(op.stochastic for op in ops) and not config.stochastic:
            config = config.replace(stochastic=True)  # type: ignore[assignment]
        super().__init__(config, rngs=rngs, name=name or default_name("Composite", ops))
        self.operators = nnx.List(ops)
        self.conditions = nnx.static(tuple(conditions) if conditions is not None else None)
        self.router = nnx.static(router)

    def _outputs(self, data: Batch, keys: Any) -> list[Batch]:
        return [
            op.apply_batch(dict(data), child_keys(keys, i)) for i, op in enumerate(self.operators)
        ]

    def _merge(self, outputs: list[Batch]) -> Batch:
        merge = self.config.merge
        if merge == "dict":
            return {f"{name}_{i}": v for i, out in enumerate(outputs) for name, v in out.items()}
        fields = list(outputs[0])
        for i, out in enumerate(outputs[1:], start=1):
            if list(out) != fields:
                raise DataraxError(
                    f"CompositeOperatorModule '{self.name}': parallel merge '{merge}' needs "
                    f"every operator to give the same fields; operator 0 gives {fields}, "
                    f"operator {i} gives {list(out)}. Use merge='dict' to keep them apart."
                )
        result: Batch = {}
        for name in fields:
            values = [out[name] for out in outputs]
            if merge == "concat":
                if any(jnp.ndim(v) < 2 for v in values):
                    raise DataraxError(
                        f"CompositeOperatorModule '{self.name}': parallel merge 'concat' joins "
                        f"each record's first axis, but field '{name}' holds one value per "
                        f"record (shapes {[tuple(jnp.shape(v)) for v in values]}). Use "
                        "merge='stack' (a new axis) or merge='dict' (the fields kept apart)."
                    )
                result[name] = jnp.concatenate(values, axis=1)
            elif merge == "stack":
                result[name] = jnp.stack(values, axis=1)
            elif merge == "sum":
                result[name] = jnp.sum(jnp.stack(values), axis=0)
            else:
                result[name] = jnp.mean(jnp.stack(values), axis=0)
        return result

    def _weighted(self, outputs: list[Batch]) -> Batch:
        weights = self.config.weights or ()
        result: Batch = {}
        for name in outputs[0]:
            # integer and bool fields become the default float explicitly: a user's strict
            # jax_numpy_dtype_promotion refuses the implicit ``float * int32``
            values = [out[name] if jnp.issubdtype(out[name].dtype, jnp.inexact)
                      else out[name].astype(jnp.result_type(float)) for out in outputs]
            total = sum(w * value for w, value in zip(weights, values))
            result[name] = jnp.asarray(total, jnp.result_type(total))  # strong, not weak, type
        return result

    def _one_value(self, value: Any, what: str, dtype: str) -> Any:
        """``value`` as one ``dtype`` scalar per record, or a ConfigError naming ``what``."""
        if jnp.shape(value) != ():
            raise ConfigError(
                f"CompositeOperatorModule '{self.name}': {what} must give one value per record "
                f"(a scalar), got shape {tuple(jnp.shape(value))}. It gets one record's fields "
                "(no batch axis): reduce it, e.g. jnp.any(...) or r['kind'][0]."
            )
        return jnp.asarray(value, dtype)

    def _conditional(self, record: Batch, key: Any) -> Batch:
        for i, (op, condition) in enumerate(zip(self.operators, self.conditions or ())):
            pred = self._one_value(condition(record), f"condition {i}", "bool")
            record = apply_where(pred, op, record,
                                 child_key(key, i), f"operator {i} ({op.name})",
                                 f"CompositeOperatorModule '{self.name}'")
        return record

    def _branch(self, record: Batch, key: Any) -> Batch:
        branches = switch_branches(self.operators, record, key,
                                   f"CompositeOperatorModule '{self.name}'")
        value = self.router(record)
        dtype = jnp.result_type(value)
        if not (jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.bool_)):
            raise ConfigError(
                f"CompositeOperatorModule '{self.name}': the router must give an integer (the "
                f"index of the operator to apply), got {dtype}; it is not truncated for you: "
                "make it an integer, e.g. jnp.floor(x).astype(jnp.int32) or jnp.argmax(...)."
            )
        index = self._one_value(value, "the router", "int32")
        return jax.lax.switch(index, branches, record, key)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Combine the operators' work on ``data`` by the configured strategy."""
        strategy = self.config.strategy
        if strategy == "sequential":
            for i, op in enumerate(self.operators):
                data = op.apply_batch(data, child_keys(keys, i))
            return data
        if strategy == "parallel":
            return self._merge(self._outputs(data, keys))
        if strategy == "weighted_parallel":
            return self._weighted(self._outputs(data, keys))
        per_record = self._conditional if strategy == "conditional_sequential" else self._branch
        try:
            if keys is None:
                return jax.vmap(lambda r: per_record(r, None))(data)
            return jax.vmap(per_record)(data, keys)
        except TRACER_ERRORS as err:
            what = "a condition" if strategy == "conditional_sequential" else "the router"
            first = first_line(err)
            raise ConfigError(
                f"CompositeOperatorModule '{self.name}': {what} needs a concrete value of a "
                f"traced array ({type(err).__name__}: {first}). It runs compiled, once per "
                "record under jax.vmap: write it with jax.numpy, e.g. "
                "jnp.where(r['kind'] > 0, 0, 1) instead of 0 if ... else 1, & | ~ instead "
                "of and / or / not."
            ) from err
