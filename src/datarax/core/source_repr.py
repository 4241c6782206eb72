"""A source's short ``repr``: kind, records, fields with dtype and shape, order.

Read off what the source already holds (its config, its length, a ``known_spec()`` it
may offer), never by reading a record: a notebook printing a source costs nothing.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> MemorySource(MemorySourceConfig(shuffle=True, seed=3),
    ...              data={"x": np.zeros((10, 3), np.float32), "y": np.arange(10)})
    MemorySource(indexed, 10 records, fields {x: float32[3], y: int32[]}, shuffled seed=3)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datarax.core.lengths import length_or_none
from datarax.host.counts import count_words


def spec_text(spec: Any) -> str:
    """``{x: float32[3], text: str[]}``: each field's dtype and per-record shape."""
    if isinstance(spec, Mapping):
        return "{" + ", ".join(f"{k}: {spec_text(v)}" for k, v in spec.items()) + "}"
    dtype = getattr(spec, "dtype", None)
    kind = str(dtype) if dtype is not None else (getattr(spec, "kind", None) or "str")
    shape = ",".join(str(d) for d in getattr(spec, "shape", ()))
    return f"{kind}[{shape}]"


def source_repr(source: Any) -> str:
    """``Name(kind, N records, fields {...}, shuffled seed=s)``, each part where known."""
    name = type(source).__name__
    config = getattr(source, "config", None)
    if config is None:  # __init__ did not get far
        return f"{name}(not built)"
    parts = []
    kind = getattr(source, "kind", None)
    if kind is not None:
        parts.append(str(getattr(kind, "value", kind)))
    try:  # a repr never raises: a source half built (its __init__ raised) prints too
        length = length_or_none(source)
    except Exception:
        length = None
    parts.append("length unknown" if length is None else count_words(length, "record"))
    shard = getattr(source, "shard", None)
    if shard is not None and getattr(shard, "count", 1) > 1:
        parts.append(f"shard {shard.index} of {shard.count}")
    known = getattr(source, "known_spec", None)
    try:
        spec = known() if callable(known) else None
    except Exception:
        spec = None
    if spec:
        parts.append(f"fields {spec_text(spec)}")
    for switch in ("shuffle", "shuffle_files"):
        if getattr(config, switch, None) is not None:
            on = bool(getattr(config, switch))
            parts.append(f"shuffled seed={config.seed}" if on else "in order")
            break
    return f"{name}({', '.join(parts)})"
