"""Operators: pipeline stages that transform batches.

Image operators live in :mod:`datarax.operators.image`. Each name is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.operators.batch_mix import BatchMixOperatorConfig, BatchMixOperator
    from datarax.operators.choice import ProbabilisticOperator, ProbabilisticOperatorConfig
    from datarax.operators.choice import SelectorOperator, SelectorOperatorConfig
    from datarax.operators.composite import CompositeOperatorConfig, CompositeOperatorModule
    from datarax.operators.composite import CompositionStrategy
    from datarax.operators.element import ElementOperator, ElementOperatorConfig
    from datarax.operators.filter import FilterOperator, FilterOperatorConfig
    from datarax.operators.map import MapOperator, MapOperatorConfig

_HOMES = {
    **dict.fromkeys(("BatchMixOperatorConfig", "BatchMixOperator"), "datarax.operators.batch_mix"),
    **dict.fromkeys(("CompositeOperatorConfig", "CompositeOperatorModule", "CompositionStrategy"),
                    "datarax.operators.composite"),
    **dict.fromkeys(("ElementOperator", "ElementOperatorConfig"), "datarax.operators.element"),
    **dict.fromkeys(("FilterOperator", "FilterOperatorConfig"), "datarax.operators.filter"),
    **dict.fromkeys(("MapOperator", "MapOperatorConfig"), "datarax.operators.map"),
    **dict.fromkeys(("ProbabilisticOperator", "ProbabilisticOperatorConfig", "SelectorOperator",
                     "SelectorOperatorConfig"), "datarax.operators.choice"),
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = [
    "BatchMixOperatorConfig", "BatchMixOperator", "CompositeOperatorConfig",
    "CompositeOperatorModule", "CompositionStrategy", "ElementOperator",
    "ElementOperatorConfig", "FilterOperator", "FilterOperatorConfig", "MapOperator",
    "MapOperatorConfig", "ProbabilisticOperator", "ProbabilisticOperatorConfig",
    "SelectorOperator", "SelectorOperatorConfig",
]


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
