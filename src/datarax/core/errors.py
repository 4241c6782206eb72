"""Error types raised by datarax.

Every error says what was wrong, where (file, record index, field or setting) and what
to do about it. All derive from :class:`DataraxError`, itself a ``ValueError`` so code
that already catches ``ValueError`` keeps working. They are defined in
:mod:`datarax.errors` (which imports nothing else) and named here.
"""

from __future__ import annotations

from datarax.errors import (
    DataraxError,
    ConfigError,
    SpecMismatchError,
    StateError,
    StaleIteratorError,
    SourceContractError,
    RecordError,
    MissingExtraError,
)

__all__ = [
    "DataraxError",
    "ConfigError",
    "SpecMismatchError",
    "StateError",
    "StaleIteratorError",
    "SourceContractError",
    "RecordError",
    "MissingExtraError",
]
