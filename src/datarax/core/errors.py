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
    SourceChangedError,
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
    "SourceChangedError",
    "MissingExtraError",
]


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message, without its closing full stop ("" if none):
    how an error quotes the cause it explains.

    Example:
        >>> first_line(TypeError("Abstract tracer value. See the docs."))
        'Abstract tracer value. See the docs'
        >>> first_line(KeyError())
        ''
    """
    text = str(err).strip()
    return text.splitlines()[0].rstrip(".") if text else ""
