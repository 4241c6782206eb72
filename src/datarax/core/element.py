"""``Element`` (one record as operators see it) and ``RecordMetadata``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RecordMetadata:
    """Where a record came from.

    Attributes:
        index: the record's stable index in its source (its position before shuffling).
        epoch: the pass over the source that served it.
        source: the name of the source.
    """

    index: Any
    epoch: Any = 0
    source: str = dataclasses.field(default="", metadata={"static": True})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Element:
    """One record: a dict of fields plus optional metadata.

    Elements are immutable pytrees, so operators work under ``jax.vmap``/``jax.jit``.

    ``metadata`` is filled by a source built with ``track_metadata=True`` when iterated
    directly; inside a Pipeline's stages it is None (keep a record's origin in a field).

    Example:
        >>> import jax.numpy as jnp
        >>> e = Element({"x": jnp.ones(2), "y": 1})
        >>> e2 = e.update_data({"x": e.data["x"] * 2})
        >>> float(e2.data["x"][0]), e2.data["y"], float(e.data["x"][0])
        (2.0, 1, 1.0)
    """

    data: dict[str, Any]
    metadata: RecordMetadata | None = None

    def update_data(self, updates: dict[str, Any]) -> Element:
        """A new element whose data is this one's with ``updates`` merged in."""
        if not isinstance(updates, dict):
            raise TypeError(
                f"Element.update_data expects a dict of fields, got {type(updates).__name__}."
            )
        return dataclasses.replace(self, data={**self.data, **updates})

    def replace_data(self, data: dict[str, Any]) -> Element:
        """A new element whose data is exactly ``data`` (fields not listed are dropped)."""
        return dataclasses.replace(self, data=dict(data))

    def __getitem__(self, name: Any) -> Any:
        """Refused: an element is not a dict; its fields are ``element.data``."""
        raise TypeError(
            f"Element is not a dict: read a field as element.data[{name!r}] (its fields: "
            f"{sorted(map(str, self.data))}), and return element.update_data({{...}}) or a "
            "dict of the fields fn changes."
        )
