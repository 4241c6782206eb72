"""Core contracts: configs, modules, elements, specs, sources, operators.

Each name is imported on first use (:mod:`datarax.exports`): a module that needs only
``datarax.core.errors`` (a decode process, a CLI command) does not import JAX or Flax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule
    from datarax.core.element import Element, RecordMetadata
    from datarax.core.errors import (
        ConfigError,
        DataraxError,
        RecordError,
        SourceContractError,
        SpecMismatchError,
        StateError,
    )
    from datarax.core.indexed import IndexedSource
    from datarax.core.module import DataraxModule
    from datarax.core.operator import OperatorModule
    from datarax.core.stream import StreamSource

# Each exported name and the module that defines it.
_HOMES = {
    "ConfigError": "datarax.core.errors",
    "DataSourceModule": "datarax.core.data_source",
    "DataraxError": "datarax.core.errors",
    "DataraxModule": "datarax.core.module",
    "Element": "datarax.core.element",
    "IndexedSource": "datarax.core.indexed",
    "OperatorModule": "datarax.core.operator",
    "RecordError": "datarax.core.errors",
    "RecordMetadata": "datarax.core.element",
    "SourceContractError": "datarax.core.errors",
    "SpecMismatchError": "datarax.core.errors",
    "StateError": "datarax.core.errors",
    "StreamSource": "datarax.core.stream",
    "StructuralConfig": "datarax.core.config",
}

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
