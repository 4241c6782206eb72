"""``DataraxModule``: the NNX module base shared by sources and operators."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import sys
from typing import Any, ClassVar

from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.signature import InitSignature
from datarax.core.errors import ConfigError
from datarax.core.keys import check_rngs


class DataraxModule(nnx.Module):
    """An NNX module configured by a frozen :class:`StructuralConfig`.

    The config, the first positional argument, is static structure; a subclass naming
    its :attr:`config_class` also takes its settings as keywords (:meth:`build_config`).
    Array data lives in ``nnx.Variable`` attributes. ``name`` defaults to the class name.
    """

    config: StructuralConfig
    #: the config's class: its fields are the settings the module takes as keywords
    config_class: ClassVar[type[StructuralConfig] | None] = None
    __signature__ = InitSignature()

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, StructuralConfig):
            raise ConfigError(
                f"{type(self).__name__} needs a StructuralConfig instance as its first "
                f"argument, got {type(config).__name__}. {_config_hint(type(self))}"
            )
        check_rngs(rngs, type(self).__name__)
        self.config = nnx.static(config)
        self.name = nnx.static(name if name is not None else type(self).__name__)

    @classmethod
    def build_config(cls, config: Any, settings: dict[str, Any]) -> Any:
        """The module's config: ``config``, or one built from keyword ``settings``. Given
        both, they must agree; else (or an unknown setting) :class:`ConfigError`.

        Example:
            >>> from datarax.operators import ElementOperator, ElementOperatorConfig
            >>> ElementOperator.build_config(None, {"stochastic": True})
            ElementOperatorConfig(stochastic=True, stream_name=None)
        """
        owner, config_cls = cls.__name__, cls.config_class
        if config_cls is None:
            if settings:
                raise ConfigError(f"{owner} takes no settings {sorted(settings)}.")
            return config
        names = [f.name for f in dataclasses.fields(config_cls)]
        unknown = sorted(set(settings) - set(names))
        if unknown:
            raise ConfigError(
                f"{owner} got unknown setting(s) {unknown}; its settings are {names}."
                + _near_misses(cls, unknown, names)
                + "".join(f" {config_cls.refused_options[name]}" for name in unknown[:1]
                          if name in config_cls.refused_options)
            )
        if config is None:
            return config_cls(**settings)
        if not isinstance(config, config_cls):
            raise ConfigError(
                f"{owner}'s config (its first argument) must be of type {config_cls.__name__}, got "
                f"{type(config).__name__} {config!r}. Pass the settings as keywords instead, "
                f"e.g. {owner}({names[0]}=...), or build {config_cls.__name__}(...)."
            )
        merged = dataclasses.replace(config, **settings)
        differ = [n for n in settings if getattr(merged, n) != getattr(config, n)]
        if differ:
            said = ", ".join(
                f"{n}={settings[n]!r} (config: {getattr(config, n)!r})" for n in differ
            )
            raise ConfigError(
                f"{owner} got keyword settings that disagree with its {config_cls.__name__}: "
                f"{said}. Give each setting once, in the config or as a keyword."
            )
        return config


def _near_misses(cls: type, unknown: list[str], settings: list[str]) -> str:
    """" Did you mean ...?" for unknown settings near a config setting or a keyword
    argument of the module."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    own = [n for n, p in params.items() if n not in ("self", "config")
           and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    close = [m for name in unknown for m in difflib.get_close_matches(name, [*settings, *own], n=1)]
    meant = [f"{m}=" for m in close if m in settings]
    arguments = [f"{m}=" for m in close if m not in settings]
    out = f" Did you mean {' / '.join(meant)}?" if meant else ""
    if arguments:
        out += (f" Did you mean {' / '.join(arguments)}, a keyword argument of {cls.__name__} "
                "(not a setting of its config)?")
    return out


def _config_hint(cls: type) -> str:
    """How to build the config of ``cls`` (or, for a user's class, define one)."""
    name = cls.__name__
    config = cls.config_class.__name__ if cls.config_class is not None else None
    module = sys.modules.get(cls.__module__)
    for guess in (_named_config(name), name + "Config"):
        if config is None and isinstance(getattr(module, guess, None), type):
            config = guess
    if config is not None:
        return f"Build one, e.g. {name}({config}(), ...)."
    if cls.__module__.split(".")[0] != "datarax":
        return (f"Define its config as a frozen dataclass deriving from StructuralConfig "
                f"(@dataclass(frozen=True) class {name}Config(StructuralConfig): ...), "
                f"build {name}({name}Config(), ...), and pass it on first: "
                "super().__init__(config, rngs=rngs, name=name).")
    return f"Build one, e.g. {name}(StructuralConfig(), ...)."


def _named_config(cls_name: str) -> str:
    """The project's config naming: ``ArrayRecordSourceModule`` -> ``ArrayRecordSourceConfig``."""
    for suffix in ("Module", "Source"):
        if cls_name.endswith(suffix):
            return cls_name[: -len(suffix)] + suffix.replace("Module", "") + "Config"
    return cls_name + "Config"


class HostState:
    """Base of a module's Python-only bookkeeping: never NNX state, never structure.

    Instances of a class compare equal, so they do not split NNX graph definitions
    (equally built modules share compiled steps).

    Example:
        >>> class Seen(HostState):
        ...     def __init__(self):
        ...         self.count = 0
        >>> a, b = Seen(), Seen()
        >>> a.count = 3
        >>> a == b, hash(a) == hash(b)
        (True, True)
    """

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))
