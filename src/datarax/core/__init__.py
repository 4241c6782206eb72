"""Core contracts: configs, modules, elements, specs, sources, operators.

Each name is imported on first use: a program that builds a MemorySource loads no
stream source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule
    from datarax.core.element import Element, RecordMetadata
    from datarax.core.errors import (
        ConfigError, DataraxError, RecordError, SourceContractError, SpecMismatchError,
        StateError,
    )
    from datarax.core.indexed import IndexedSource
    from datarax.core.module import DataraxModule
    from datarax.core.operator import OperatorModule
    from datarax.core.stream import StreamSource

_HOMES = {
    **dict.fromkeys(("ConfigError", "DataraxError", "RecordError", "SourceContractError",
                     "SpecMismatchError", "StateError"), "datarax.core.errors"),
    "DataSourceModule": "datarax.core.data_source",
    "DataraxModule": "datarax.core.module",
    "Element": "datarax.core.element",
    "IndexedSource": "datarax.core.indexed",
    "OperatorModule": "datarax.core.operator",
    "RecordMetadata": "datarax.core.element",
    "StreamSource": "datarax.core.stream",
    "StructuralConfig": "datarax.core.config",
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
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


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
