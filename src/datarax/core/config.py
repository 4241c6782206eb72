"""``StructuralConfig``: the frozen, validated base of every datarax config.

Subclasses are frozen dataclasses that add fields with defaults and validate them in
``__post_init__`` after calling ``super().__post_init__()``::

    from dataclasses import dataclass
    from datarax.core.config import StructuralConfig

    @dataclass(frozen=True)
    class MyConfig(StructuralConfig):
        size: int = 4

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.size < 1:
                raise ValueError("size must be >= 1")
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from datarax.core.errors import ConfigError, SourceContractError, StateError
from datarax.core.signature import InitSignature
from datarax.host.counts import check_count, python_ints  # noqa: F401  (check_count: named here)


class _ConfigType(type):
    """Names a config's options when it is given one it does not have."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        undeclared = _fields_not_made(cls)
        if undeclared:
            raise SourceContractError(
                f"{cls.__name__} declares fields ({', '.join(undeclared)}) but is not itself "
                "a dataclass, so it takes none of them: decorate it with "
                "@dataclass(frozen=True), as StructuralConfig is.")
        options = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
        unknown = [name for name in kwargs if name not in options]
        if unknown:
            message = unknown_option_message(cls.__name__, unknown[0], options)
            why = getattr(cls, "refused_options", {}).get(unknown[0])
            raise TypeError(f"{message} {why}" if why else message)
        return super().__call__(*args, **kwargs)


def _fields_not_made(cls: type) -> list[str]:
    """Non-``ClassVar`` fields ``cls`` annotates without being a dataclass itself."""
    if "__dataclass_fields__" in cls.__dict__:
        return []
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return [name for name, kind in inspect.get_annotations(cls).items()
            if name not in fields and "ClassVar" not in str(kind)]


def unknown_option_message(owner: str, name: str, options: list[str]) -> str:
    """The message for option ``name``, which ``owner`` does not have.

    >>> unknown_option_message("SourceConfig", "shuffle", ["seed", "shuffle_files"])
    "SourceConfig got an unexpected keyword argument 'shuffle' (did you mean 'shuffle_files'?); its options are: seed, shuffle_files."
    """
    close = difflib.get_close_matches(name, options, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"{owner} got an unexpected keyword argument {name!r}{hint}; its options "
            f"are: {', '.join(options) or 'none'}.")


@dataclass(frozen=True)
class StructuralConfig(metaclass=_ConfigType):
    """Frozen dataclass base for configs; fields fix a module's structure.

    Configs are hashable (they key compiled-function caches). ``refused_options`` maps
    options a config deliberately lacks to why.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class RowsConfig(StructuralConfig):
        ...     shuffle: bool = False
        ...     seed: int = 0
        ...     def __post_init__(self):
        ...         super().__post_init__()
        ...         check_bool(self, "shuffle")
        >>> RowsConfig(shuffle=True).replace(seed=3).to_dict()
        {'shuffle': True, 'seed': 3}
        >>> RowsConfig(shuffle="yes")
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: RowsConfig.shuffle must be a bool (True/False), got str 'yes'.
    """

    refused_options: ClassVar[dict[str, str]] = {}
    __signature__ = InitSignature()

    def __post_init__(self) -> None:
        """Validate fields (subclasses call it first); checks a ``num_epochs`` field."""
        if hasattr(self, "num_epochs"):
            check_int(self, "num_epochs", minimum=1, allowed=(-1,),
                      allowed_means="-1 for passes without end")

    def to_dict(self) -> dict[str, Any]:
        """The config's fields as a plain dict (JSON-able when the fields are)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> StructuralConfig:
        """A copy with ``changes`` applied (and validated again)."""
        return dataclasses.replace(self, **changes)


def check_int(
    config: object, name: str, *, minimum: int | None = None, allowed: tuple[int, ...] = (),
    allowed_means: str = "",
) -> None:
    """Raise :class:`ConfigError` unless ``config.name`` is an int >= ``minimum`` or in
    ``allowed`` (worded by ``allowed_means``); a NumPy integer is stored as a Python int.
    """
    value = getattr(config, name)
    cls = type(config).__name__
    extra = f" (or {allowed_means})" if allowed_means else \
        f" (or one of {list(allowed)})" if allowed else ""
    if isinstance(value, np.integer):
        value = python_ints(value)
        object.__setattr__(config, name, value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{cls}.{name} must be an int{extra}, got {type(value).__name__} {value!r}."
        )
    if value in allowed:
        return
    if minimum is not None and value < minimum:
        raise ConfigError(f"{cls}.{name} must be >= {minimum}{extra}, got {value}.")


def check_bool(config: object, name: str) -> None:
    """Raise :class:`ConfigError` unless ``config.name`` is a bool (NumPy's stored as Python's)."""
    value = getattr(config, name)
    if isinstance(value, np.bool_):
        value = bool(value)
        object.__setattr__(config, name, value)
    if not isinstance(value, bool):
        raise ConfigError(
            f"{type(config).__name__}.{name} must be a bool (True/False), "
            f"got {type(value).__name__} {value!r}."
        )


def check_seed(config: object, name: str = "seed") -> None:
    """Raise :class:`ConfigError` unless ``config.name`` is an int in [0, 2**32)."""
    check_int(config, name, minimum=0)
    value = getattr(config, name)
    if value >= 2**32:
        raise ConfigError(
            f"{type(config).__name__}.{name} must be < 2**32 (it seeds a 32-bit "
            f"permutation), got {value}."
        )


# Config fields that switch a seed on: the seed is a setting only while one is on.
SEED_SWITCHES = ("shuffle", "shuffle_files")
# Config fields that never change which record a position serves.
NOT_SETTINGS = ("num_epochs", "track_metadata", "cast_float64", "num_threads", "read_ahead",
                "download", "max_skipped", "max_skipped_fraction")


def config_settings(config: StructuralConfig) -> dict[str, Any]:
    """The scalar fields of ``config`` deciding an epoch's order and content, switches
    first; a seed whose switch is off is left out.

    Example:
        >>> @dataclass(frozen=True)
        ... class Cfg(StructuralConfig):
        ...     shuffle: bool = False
        ...     seed: int = 1
        >>> config_settings(Cfg()), config_settings(Cfg(shuffle=True))
        ({'shuffle': False}, {'shuffle': True, 'seed': 1})
    """
    fields = {
        k: v.item() if isinstance(v, np.generic) else v
        for k, v in config.to_dict().items()
        if k not in NOT_SETTINGS
    }
    fields = {k: v for k, v in fields.items() if isinstance(v, (bool, int, float, str))}
    switches = [k for k in SEED_SWITCHES if k in fields]
    if switches and not any(fields[k] for k in switches):
        fields.pop("seed", None)
    ordered = {k: fields[k] for k in switches}
    ordered.update((k, v) for k, v in fields.items() if k not in ordered)
    return ordered


# what a state of another share would do, and the restore that re-splits an epoch
_SHARD_NOTE = (
    " Its position counts that share's records: here it would serve some records twice "
    "and others never. To continue on another process count, restore the pipeline's "
    "state (pipeline.set_state, or datarax.checkpoint.restore of the pipeline): it "
    "re-splits the rest of the epoch."
)


def check_settings(saved: Any, current: dict[str, Any], where: str) -> None:
    """Refuse ``saved`` settings unless they equal ``current``, naming the first that
    differs (or both name lists, where one side lacks it).

    Example:
        >>> check_settings({"seed": 1}, {"seed": 2}, "MySource")
        Traceback (most recent call last):
        ...
        datarax.core.errors.StateError: MySource state was saved with seed=1 but this source has seed=2; restore it into an identically built source.
    """
    if not isinstance(saved, dict):
        raise StateError(
            f"{where} state 'settings' must be the dict get_state() wrote, got "
            f"{type(saved).__name__}; the state was tampered with.",
            field="settings",
        )
    for key in [*current, *(k for k in saved if k not in current)]:
        if saved.get(key) != current.get(key) and (key not in saved or key not in current):
            only = "this source" if key in current else "the state"
            raise StateError(
                f"{where} state was saved by a source of other settings: the state's are "
                f"{list(saved)}, this source's {list(current)} ('{key}' only in {only}): it "
                "comes from another kind of source (or one of other parts); restore it into "
                "the source it was saved from, built as it was then.",
                field=key,
            )
        if saved.get(key) != current.get(key):
            raise StateError(
                f"{where} state was saved with {key}={saved.get(key)!r} but this source has "
                f"{key}={current.get(key)!r}; restore it into an identically built source."
                + _SHARD_NOTE * (key == "shard"),
                field=key,
            )
