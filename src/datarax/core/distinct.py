"""A source built from other sources refuses one of them given twice.

Each child source keeps its own read position: one object in two places would share one
position, and reading either place would move the other.

Example:
    >>> a, b = object(), object()
    >>> check_distinct("ConcatSource", "part", ["0", "1", "2"], [a, b, a])
    Traceback (most recent call last):
    ...
    datarax.core.errors.SourceContractError: ConcatSource parts 0 and 2 are the same object; each part keeps its own position, so build a separate source for each entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datarax.core.errors import SourceContractError

__all__ = ["check_distinct"]


def check_distinct(owner: str, kind: str, labels: Sequence[str], children: Sequence[Any]) -> None:
    """Refuse a child object that appears twice in ``children``.

    Args:
        owner: the composite source's class name, first in the message.
        kind: what one child is called ("source", "part").
        labels: how the message names each child (``"'a'"``, ``"0"``), in order.
        children: the child objects, compared by identity.

    Raises:
        SourceContractError: naming both places the object stands in.
    """
    seen: dict[int, str] = {}
    for label, child in zip(labels, children):
        if id(child) in seen:
            raise SourceContractError(
                f"{owner} {kind}s {seen[id(child)]} and {label} are the same object; each {kind} "
                "keeps its own position, so build a separate source for each entry."
            )
        seen[id(child)] = label
