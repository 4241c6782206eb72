"""Columns read from TFDS / Hugging Face as a datarax batch carries them: the fields to
keep, text on the host (``object`` arrays of ``str``; ``bytes`` kept), and their spec.
The dtype policy lives in :mod:`datarax.core.dtypes`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datarax.core.dtypes import is_text_scalar
from datarax.core.errors import ConfigError
from datarax.core.spec import TextSpec, field_spec


def as_text(array: np.ndarray) -> np.ndarray:
    """A numpy ``object`` array of ``str``/``bytes`` (the host form of text fields)."""
    return array.astype(object, copy=False)


def select_keys(
    available: Sequence[str],
    include_keys: Sequence[str] | None,
    exclude_keys: Sequence[str] | None,
    *,
    where: str,
) -> list[str]:
    """The columns to keep, in dataset order; unknown names in either list are refused."""
    for label, keys in (("include_keys", include_keys), ("exclude_keys", exclude_keys)):
        if keys is None:
            continue
        missing = [k for k in keys if k not in available]
        if missing:
            raise ConfigError(
                f"{where}: {label} names field(s) {missing} that the dataset does not "
                f"have; its fields are {list(available)}."
            )
    kept = [k for k in available if include_keys is None or k in include_keys]
    kept = [k for k in kept if exclude_keys is None or k not in exclude_keys]
    if not kept:
        raise ConfigError(
            f"{where}: include_keys/exclude_keys leave no field to serve (fields: "
            f"{list(available)})."
        )
    return kept


def normalize_keys(config: Any, name: str) -> None:
    """Validate a frozen config's field names and store them as a tuple of str (or None).

    Any iterable of names is accepted: a list or tuple keeps its order, an unordered
    collection (a set) is stored sorted, so equal configs compare and hash alike in
    every process. A single ``str`` is refused (it would read as its characters).

    Example:
        >>> from types import SimpleNamespace
        >>> config = SimpleNamespace(include_keys={"label", "image"})
        >>> normalize_keys(config, "include_keys")
        >>> config.include_keys
        ('image', 'label')
    """
    value = getattr(config, name)
    if value is None:
        return
    where = f"{type(config).__name__}.{name}"
    if is_text_scalar(value):
        raise ConfigError(
            f"{where} must be None or an iterable of field names (a list, tuple or set), "
            f"got the single string {value!r}; wrap it: {name}=({value!r},)."
        )
    try:
        names = list(value)
    except TypeError:
        raise ConfigError(
            f"{where} must be None or an iterable of field names (a list, tuple or set), "
            f"got {type(value).__name__} {value!r}."
        ) from None
    bad = [k for k in names if not isinstance(k, str)]
    if bad:
        raise ConfigError(
            f"{where} must hold field names (str), but holds {bad[0]!r} "
            f"({type(bad[0]).__name__})."
        )
    if not isinstance(value, Sequence):
        names.sort()
    object.__setattr__(config, name, tuple(names))


def spec_of_columns(columns: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Per-record spec of a dict of host columns (text fields become ``TextSpec``)."""
    return {key: field_spec(value, batched=True) for key, value in columns.items()}


def text_on_host(columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The columns an eager source hands to MemorySource: text fields as ``object``
    arrays of ``str`` (kept on the host, gathered by the same record indices as the
    device fields), every other field as it is."""
    specs = spec_of_columns(columns)
    return {k: (as_text(v) if isinstance(specs[k], TextSpec) else v) for k, v in columns.items()}
