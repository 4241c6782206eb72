"""Operators: pipeline stages that transform batches."""

from datarax.operators.element import ElementOperator, ElementOperatorConfig

__all__ = ["ElementOperator", "ElementOperatorConfig"]
