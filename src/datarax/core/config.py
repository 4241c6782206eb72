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
from dataclasses import dataclass
from typing import Any

from datarax.core.errors import ConfigError


@dataclass(frozen=True)
class StructuralConfig:
    """Frozen dataclass base for configs; fields fix a module's structure.

    Being frozen and hashable, a config can key compiled-function caches and be
    compared field by field when a saved state is restored.
    """

    def __post_init__(self) -> None:
        """Validate fields. Subclasses call ``super().__post_init__()`` first."""

    def to_dict(self) -> dict[str, Any]:
        """The config's fields as a plain dict (JSON-able when the fields are)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> StructuralConfig:
        """A copy with ``changes`` applied (and validated again)."""
        return dataclasses.replace(self, **changes)


def check_int(
    config: object, name: str, *, minimum: int | None = None, allowed: tuple[int, ...] = ()
) -> None:
    """Raise :class:`ConfigError` unless ``config.name`` is an int >= ``minimum``.

    Values listed in ``allowed`` (e.g. ``-1`` for "unbounded") pass as well.
    """
    value = getattr(config, name)
    cls = type(config).__name__
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{cls}.{name} must be an int, got {type(value).__name__} {value!r}."
        )
    if value in allowed:
        return
    if minimum is not None and value < minimum:
        extra = f" (or one of {list(allowed)})" if allowed else ""
        raise ConfigError(f"{cls}.{name} must be >= {minimum}{extra}, got {value}.")


def check_bool(config: object, name: str) -> None:
    """Raise :class:`ConfigError` unless ``config.name`` is a bool."""
    value = getattr(config, name)
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
