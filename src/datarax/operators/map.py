"""``MapOperator``: one array function applied to chosen fields of every record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax

from datarax.core.batch import batch_length
from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError
from datarax.operators._records import (
    TRACER_ERRORS,
    FunctionOperator,
    check_fields_out,
    check_keys,
    check_draw_settings,
    require_fields,
    traced_fn_error,
)
from datarax.typing import Batch


def _normalize_subtree(subtree: Any) -> tuple[str, ...] | None:
    if subtree is None:
        return None
    if isinstance(subtree, str):
        return (subtree,)
    if isinstance(subtree, Mapping):
        bad = {k: v for k, v in subtree.items() if not isinstance(v, bool)}
        if bad:
            chosen = sorted(str(k) for k, v in subtree.items() if v is None or v is True)
            hint = (
                f" A None leaf is upstream datarax's mask form; here name the fields: "
                f"subtree={chosen!r} (or {dict.fromkeys(chosen, True)!r})."
                if any(v is None for v in bad.values()) and chosen else ""
            )
            raise ConfigError(
                f"MapOperatorConfig.subtree as a mask must map field names to True/False, "
                f"got {bad!r}.{hint}"
            )
        return tuple(sorted(k for k, v in subtree.items() if v))
    try:
        names = tuple(subtree)
    except TypeError as err:
        raise ConfigError(
            "MapOperatorConfig.subtree must be None (every field), a field name, a list of "
            f"field names or a {{field: bool}} mask, got {type(subtree).__name__}."
        ) from err
    if not all(isinstance(n, str) for n in names):
        raise ConfigError(f"MapOperatorConfig.subtree field names must be strings, got {names!r}.")
    return names


@dataclass(frozen=True)
class MapOperatorConfig(StructuralConfig):
    """Configuration of :class:`MapOperator`.

    Attributes:
        subtree: the fields ``fn`` applies to: ``None`` (every field), a name, a list of
            names, or a ``{field: bool}`` mask (kept as a tuple of names).
        stochastic: ``fn`` takes the record's PRNG key too, the same for every chosen
            field (an image and its mask get the same random flip).
        stream_name: the ``nnx.Rngs`` stream of the base key when ``rngs`` is given.
    """

    subtree: Any = None
    stochastic: bool = False
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_draw_settings(self)
        names = _normalize_subtree(self.subtree)
        if names is not None and not names:
            raise ConfigError("MapOperatorConfig.subtree selects no field; name at least one.")
        object.__setattr__(self, "subtree", names)


class MapOperator(FunctionOperator):
    """Apply ``fn(array)`` (or ``fn(array, key)``) to chosen fields of each record.

    ``fn`` sees one record's array, under ``jax.vmap``; fields not chosen pass unchanged.

    Example:
        >>> import jax.numpy as jnp
        >>> op = MapOperator(subtree=["x"], fn=lambda a: a * 10)  # or MapOperatorConfig(...)
        >>> out = op.apply_batch({"x": jnp.arange(3), "y": jnp.arange(3)}, None)
        >>> out["x"].tolist(), out["y"].tolist()
        ([0, 10, 20], [0, 1, 2])
    """

    config: MapOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    per_record = True  # fn sees one record (vmapped)
    config_class = MapOperatorConfig

    def fn_arguments(self) -> tuple[str, ...]:
        """``fn(array, key)`` when stochastic, else ``fn(array)``."""
        return ("array", "key") if self.config.stochastic else ("array",)

    def _fields(self, data: Batch) -> tuple[str, ...]:
        if self.config.subtree is None:
            return tuple(data)
        require_fields(data, self.config.subtree, f"MapOperator '{self.name}'")
        return self.config.subtree

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Apply ``fn`` to the chosen fields of each record (``keys``: one per record)."""
        fields = self._fields(data)
        chosen = {f: data[f] for f in fields}
        if self.config.stochastic:
            check_keys(self, keys, batch_length(chosen), required=True)
        try:
            out = self._map(chosen, keys)
        except TRACER_ERRORS as err:
            raise traced_fn_error(self, err) from err
        return {**data, **out}

    def _map(self, chosen: Batch, keys: Any | None) -> Batch:
        def checked(out: Batch) -> Batch:
            check_fields_out(self, out, traced=True)
            return out

        # a nested field's arrays each go through fn (one array at a time, as documented)
        if self.config.stochastic:
            return jax.vmap(lambda record, key: checked(
                {f: jax.tree.map(lambda a: self.fn(a, key), v) for f, v in record.items()}
            ))(chosen, keys)
        return jax.vmap(lambda record: checked(
            {f: jax.tree.map(self.fn, v) for f, v in record.items()}))(chosen)
