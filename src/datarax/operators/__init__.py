"""Operators: pipeline stages that transform batches.

Image operators live in :mod:`datarax.operators.image` (they need the ``image`` extra,
dm-pix, loaded on first use).
"""

from datarax.operators.batch_mix import BatchMixConfig, BatchMixOperator
from datarax.operators.choice import (
    ProbabilisticOperator,
    ProbabilisticOperatorConfig,
    SelectorOperator,
    SelectorOperatorConfig,
)
from datarax.operators.composite import (
    CompositeOperatorConfig,
    CompositeOperatorModule,
    CompositionStrategy,
)
from datarax.operators.element import ElementOperator, ElementOperatorConfig
from datarax.operators.map import MapOperator, MapOperatorConfig

__all__ = [
    "BatchMixConfig",
    "BatchMixOperator",
    "CompositeOperatorConfig",
    "CompositeOperatorModule",
    "CompositionStrategy",
    "ElementOperator",
    "ElementOperatorConfig",
    "MapOperator",
    "MapOperatorConfig",
    "ProbabilisticOperator",
    "ProbabilisticOperatorConfig",
    "SelectorOperator",
    "SelectorOperatorConfig",
]
