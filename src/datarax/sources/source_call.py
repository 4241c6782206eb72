"""The first arguments of a source: its settings (a config, or keywords), then its data.

``MemorySource(MemorySourceConfig(shuffle=True), data)`` and
``MemorySource(data=data, shuffle=True)`` build equal configs: :func:`source_config`
turns keywords into the config through the mechanism operators use
(:meth:`datarax.core.module.DataraxModule.build_config`). A source given neither takes
its defaults where it has them. An unknown or disagreeing keyword, a required setting
left out, data where the config goes, the two swapped, another source's config, or a
call Python would refuse with a ``TypeError`` (:func:`config_keyword`) is a
``ConfigError`` saying what was passed and the call that works.

Example:
    >>> from datarax.sources import MemorySource
    >>> MemorySource([{"x": 1}, {"x": 2}])
    Traceback (most recent call last):
    ...
    datarax.core.errors.ConfigError: MemorySource got list [{'x': 1}, {'x': 2}] where its MemorySourceConfig goes, and no data: the config comes first, the data second. Call MemorySource(MemorySourceConfig(), data=...).
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError

__all__ = ["MISSING", "check_config_and_data", "check_config_given", "config_keyword", "describe",
           "source_config"]


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
    text = _SHORT.repr(value)
    if "\n" in text:  # an NNX object's repr (nnx.Rngs ...): its type alone
        return type(value).__name__
    return f"{type(value).__name__} {text}"


def source_config(source: Any, config: Any, settings: dict[str, Any]) -> Any:
    """The config of ``source`` (a source class with a ``config_class``) called with
    ``config`` (its first argument, maybe :data:`MISSING`) and keyword ``settings``.

    Without settings ``config`` is returned as given (the source's argument check names
    a missing or wrong one), or, left out, the config of defaults when every setting has
    one (``MemorySource(data=data)``); with settings the config is built from them, or checked
    against them, by ``source.build_config``.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> source_config(MemorySource, MISSING, {"shuffle": True, "seed": 3})
        MemorySourceConfig(shuffle=True, seed=3, track_metadata=False, num_epochs=1, cast_float64=False)
        >>> source_config(MemorySource, MISSING, {"shufle": True})
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: MemorySource got unknown setting(s) ['shufle']; its settings are ['shuffle', 'seed', 'track_metadata', 'num_epochs', 'cast_float64']. Did you mean shuffle=?
    """
    if not settings:
        if config is MISSING and dataclasses.is_dataclass(source.config_class):
            try:  # every setting at its default, as operators do
                return source.config_class()
            except (TypeError, ConfigError):
                return config  # a setting it must be given: the argument check names it
        return config
    if config is MISSING or config is None:
        return source.build_config(None, settings)
    if not isinstance(config, StructuralConfig):
        return config  # not a config at all: the source's argument check names it
    return source.build_config(config, settings)


def _keywords(expected: type) -> str:
    """``expected``'s settings, named for a message ("" for a non-dataclass)."""
    if not dataclasses.is_dataclass(expected):
        return ""
    return ", ".join(f.name for f in dataclasses.fields(expected))


def check_config_given(source: str, config: Any, expected: type, call: str) -> None:
    """Refuse a source given neither a config nor keyword settings (``config`` is
    :data:`MISSING`), naming both forms and the settings ``expected`` has."""
    if config is MISSING:
        raise ConfigError(
            f"{source} needs its settings: {expected.__name__}(...) first, or the settings "
            f"as keywords ({_keywords(expected)}). Call {call}.")


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
        raise ConfigError(
            f"{source} needs {wanted} first, then the {data_name}, or the {data_name} and its "
            f"settings as keywords ({_keywords(expected)}). Call {call}.")
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


def config_keyword(source: str, config: Any, data: Any, extra: tuple[Any, ...],
                   settings: dict[str, Any], *, data_name: str | tuple[str, ...] | None,
                   forms: str) -> Any:
    """The config of a source whose ``config`` is positional-only, so that a ``config=``
    keyword arrives in ``settings`` (removed from it here): returned in its place when no
    config came first (``Source(config=..., data=...)``).

    ``data_name`` names what the source takes after the config: one argument (``data``
    is it), several (a tuple of names; ``data`` the tuple of their values), or nothing
    (None; ``NpySource`` takes its files in the config). ``extra`` holds the positional
    arguments after those; ``forms`` names the accepted call forms for the message.

    Raises:
        ConfigError: for more positional arguments than the config and its data, or
            ``config=`` beside a first positional argument (the data first, or the
            config given twice).

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> MemorySource({"x": [1, 2]}, config=MemorySourceConfig())
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: MemorySource got dict {'x': [1, 2]} first and config= as a keyword: the config comes first, the data second. Call MemorySource(MemorySourceConfig(), data), MemorySource(config=MemorySourceConfig(), data=data) or MemorySource(data=data, shuffle=...) (settings as keywords).
    """
    names = (data_name,) if isinstance(data_name, str) else tuple(data_name or ())
    values = (data,) if isinstance(data_name, str) else tuple(data) if names else ()
    if extra:
        counts = ("one positional argument", "at most two positional arguments",
                  "at most three positional arguments")
        given = (config, *values, *extra)
        raise ConfigError(
            f"{source} takes {counts[len(names)]}, the config"
            + "".join(f"{' and then' if k == 0 else ' and'} the {n}" for k, n in enumerate(names))
            + f"; got {len(given)}: " + ", ".join(describe(v) for v in given)
            + (" (rngs goes by keyword: rngs=nnx.Rngs(0))"
               if any(type(v).__name__ == "Rngs" for v in extra) else "")
            + f". Call {forms}.")
    if "config" not in settings:
        return config
    keyword = settings.pop("config")
    if config is MISSING:
        return keyword
    if isinstance(config, StructuralConfig):
        raise ConfigError(
            f"{source} got its config twice: {type(config).__name__} first and config= as a "
            f"keyword. Give it once. Call {forms}.")
    order = ("the config is its only positional argument" if not names else
             f"the config comes first, the {names[0]} second" if len(names) == 1 else
             f"the config comes first, then the {' and the '.join(names)}")
    raise ConfigError(
        f"{source} got {describe(config)} first and config= as a keyword: {order}. Call {forms}.")
