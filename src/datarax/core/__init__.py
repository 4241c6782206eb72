"""Core contracts: configs, modules, elements, specs, sources, operators."""

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.element import Element, RecordMetadata
from datarax.core.indexed import IndexedSource
from datarax.core.stream import StreamSource
from datarax.core.errors import (
    ConfigError,
    DataraxError,
    RecordError,
    SourceContractError,
    SpecMismatchError,
    StateError,
)
from datarax.core.module import DataraxModule
from datarax.core.operator import OperatorModule

__all__ = [
    "ConfigError",
    "DataSourceModule",
    "DataraxError",
    "DataraxModule",
    "Element",
    "IndexedSource",
    "OperatorModule",
    "RecordError",
    "RecordMetadata",
    "SourceContractError",
    "SpecMismatchError",
    "StateError",
    "StreamSource",
    "StructuralConfig",
]
