"""The first two arguments of a source: its config, then its data or paths.

Sources taking data are built as ``Source(SourceConfig(...), data_or_paths, ...)``. The
data passed where the config goes, the two swapped, either one left out, or another
source's config is refused with a ``ConfigError`` saying what was passed and the call
that works (not Python's ``TypeError`` about a missing positional argument).

Example:
    >>> from datarax.sources import MemorySource
    >>> MemorySource([{"x": 1}, {"x": 2}])
    Traceback (most recent call last):
    ...
    datarax.core.errors.ConfigError: MemorySource got list [{'x': 1}, {'x': 2}] where its MemorySourceConfig goes, and no data: the config comes first, the data second. Call MemorySource(MemorySourceConfig(), data=...).
"""

from __future__ import annotations

import reprlib
from typing import Any

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError

__all__ = ["MISSING", "check_config_and_data", "describe"]


class _Missing:
    """The default of a required argument, so that leaving it out is named clearly."""

    def __repr__(self) -> str:
        return "<not given>"


#: an argument the caller did not pass
MISSING: Any = _Missing()

_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 3


def describe(value: Any) -> str:
    """``value`` named for a message: its type and a shortened repr."""
    if value is None:
        return "None"
    return f"{type(value).__name__} {_SHORT.repr(value)}"


def check_config_and_data(source: str, config: Any, expected: type, data: Any, *,
                          data_name: str, call: str) -> None:
    """Refuse ``Source(config, data)`` called without an ``expected`` config first and the
    ``data`` (named ``data_name``) second; ``call`` is the call that works.

    Raises:
        ConfigError: saying what was passed where, and ``call``.
    """
    name = expected.__name__
    wanted = ("an " if name[:1] in "AEIOU" else "a ") + name
    if isinstance(config, expected):
        if data is MISSING:
            raise ConfigError(f"{source} needs its {data_name} after the config. Call {call}.")
        return
    if config is MISSING:
        raise ConfigError(f"{source} needs {wanted} first, then the {data_name}. Call {call}.")
    if isinstance(data, expected):
        raise ConfigError(
            f"{source} got the {data_name} ({describe(config)}) first and the {name} second; "
            f"the config comes first. Call {call}.")
    if data is MISSING:
        raise ConfigError(
            f"{source} got {describe(config)} where its {name} goes, and no {data_name}: the "
            f"config comes first, the {data_name} second. Call {call}.")
    if isinstance(config, StructuralConfig):
        raise ConfigError(
            f"{source} needs {wanted}, got {type(config).__name__} (the config of another "
            f"kind of module). Call {call}.")
    raise ConfigError(f"{source} needs {wanted} as its first argument, got "
                      f"{describe(config)}. Call {call}.")
