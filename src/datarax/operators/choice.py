"""Per-record random choice: apply with probability p, or pick one of several operators.

The choice draws from ``fold_in(key, 0)``, the chosen operator from ``fold_in(key, i + 1)``;
``lax.cond``/``lax.switch`` choose inside the vmapped step.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length
from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError
from datarax.core.keys import child_keys
from datarax.core.operator import OperatorModule, all_per_record
from datarax.operators._records import (
    apply_where,
    check_keys,
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


@dataclass(frozen=True)
class ProbabilisticOperatorConfig(StructuralConfig):
    """Configuration of :class:`ProbabilisticOperator` (built by its constructor)."""

    probability: float = 0.5
    stochastic: bool = True
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_draw_settings(self)
        p = self.probability
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
            raise ConfigError(
                f"ProbabilisticOperator probability must be a number in [0, 1], got {p!r}."
            )
        if not isinstance(p, (int, float)):
            object.__setattr__(self, "probability", float(p))


class ProbabilisticOperator(OperatorModule):
    """Apply ``operator`` to each record with probability ``probability``.

    ``stochastic`` is derived: probability 0 or 1 over a deterministic operator draws nothing.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from datarax.operators.map import MapOperator, MapOperatorConfig
        >>> neg = MapOperator(MapOperatorConfig(), fn=lambda a: -a)
        >>> op = ProbabilisticOperator(neg, probability=1.0)
        >>> op.apply_batch({"x": jnp.arange(3)}, None)["x"].tolist()
        [0, -1, -2]
    """

    config: ProbabilisticOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]
    config_class = ProbabilisticOperatorConfig

    @property
    def per_record(self) -> bool:  # type: ignore[override]
        """Per record when the wrapped operator is."""
        return all_per_record([self.operator])

    def __init__(
        self,
        operator: OperatorModule,
        probability: float | None = None,
        *,
        config: ProbabilisticOperatorConfig | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        (op,) = check_operators([operator], "ProbabilisticOperator")
        if probability is not None:
            settings["probability"] = probability
        config = self.build_config(config, settings)
        per_record_choice = 0.0 < float(config.probability) < 1.0
        if per_record_choice:
            check_per_record_choices([op], "ProbabilisticOperator")
        stochastic = op.stochastic or per_record_choice
        super().__init__(config.replace(stochastic=stochastic), rngs=rngs,
                         name=name or default_name("Probabilistic", [op]))
        self.operator = op

    def _record(self, record: Batch, key: Any) -> Batch:
        draw = jax.random.uniform(child_key(key, 0))
        return apply_where(draw < self.config.probability, self.operator, record,
                           child_key(key, 1), self.operator.name,
                           f"ProbabilisticOperator '{self.name}'")

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Apply the operator to the records whose draw falls under ``probability``."""
        p = float(self.config.probability)
        if p == 0.0:
            return data
        if p == 1.0:
            sub = child_keys(keys, 1)
            return self.operator.apply_batch(data, sub if self.operator.stochastic else None)
        check_keys(self, keys, batch_length(data), required=True)
        return jax.vmap(self._record)(data, keys)


@dataclass(frozen=True)
class SelectorOperatorConfig(StructuralConfig):
    """Configuration of :class:`SelectorOperator` (built by its constructor)."""

    weights: tuple[float, ...] = ()
    stochastic: bool = True
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_draw_settings(self)
        object.__setattr__(self, "weights", float_weights(self.weights, "SelectorOperator weights"))


class SelectorOperator(OperatorModule):
    """Pick one of ``operators`` per record, with probabilities proportional to ``weights``.

    Every operator must give the same fields, shapes and dtypes (``lax.switch`` picks one);
    no weights (or ``()``) weigh every operator equally.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from datarax.operators.map import MapOperator, MapOperatorConfig
        >>> ops = [MapOperator(MapOperatorConfig(), fn=lambda a: a * 0),
        ...        MapOperator(MapOperatorConfig(), fn=lambda a: a * 1)]
        >>> sel = SelectorOperator(ops, weights=[0.0, 1.0])
        >>> keys = jax.random.split(jax.random.key(0), 3)
        >>> sel.apply_batch({"x": jnp.arange(3)}, keys)["x"].tolist()
        [0, 1, 2]
    """

    config: SelectorOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]
    config_class = SelectorOperatorConfig

    @property
    def per_record(self) -> bool:  # type: ignore[override]
        """Per record when every child is (a short last batch may then run padded)."""
        return all_per_record(self.operators)

    def __init__(
        self,
        operators: Sequence[OperatorModule],
        weights: Sequence[float] | None = None,
        *,
        config: SelectorOperatorConfig | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        ops = check_operators(operators, "SelectorOperator")
        check_per_record_choices(ops, "SelectorOperator")
        if weights is not None:
            settings["weights"] = check_weights(weights, len(ops), "SelectorOperator")
        config = self.build_config(config, settings)
        w = check_weights(config.weights or [1.0] * len(ops), len(ops), "SelectorOperator")
        config = config.replace(weights=w, stochastic=True)
        super().__init__(config, rngs=rngs, name=name or default_name("Selector", ops))
        self.operators = nnx.List(ops)

    def _record(self, record: Batch, key: Any) -> Batch:
        branches = switch_branches(self.operators, record, key,
                                   f"SelectorOperator '{self.name}'", offset=1)
        logits = jnp.log(jnp.asarray(self.config.weights, jnp.float32))
        index = jax.random.categorical(child_key(key, 0), logits)
        return jax.lax.switch(index, branches, record, key)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Apply one operator, drawn per record, to each record."""
        check_keys(self, keys, batch_length(data), required=True)
        return jax.vmap(self._record)(data, keys)
