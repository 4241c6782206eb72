"""A source's length where it knows it (None, or the reason, where only reading will
tell), and the span of stable indices its records take."""

from __future__ import annotations

from typing import Any


def length_or_none(source: Any) -> int | None:
    """``len(source)``, or None for a source that does not know its length.

    Example:
        >>> length_or_none([1, 2, 3]), length_or_none(iter([1, 2, 3]))
        (3, None)
    """
    try:
        return len(source)
    except TypeError:
        return None


def why_no_length(source: Any) -> str:
    """Why ``source`` has no length, in a sentence naming it: the reason its ``len()``
    gives (:class:`LengthIfKnown`), else that it defines no ``__len__``.

    Example:
        >>> why_no_length(iter([1, 2]))
        'list_iterator defines no __len__: its length is known only once a pass is read.'
    """
    try:
        len(source)
    except TypeError as err:
        if hasattr(type(source), "__len__"):  # the source's own reason
            reason = str(err)
            return reason if reason.endswith(".") else reason + "."
    return (f"{type(source).__name__} defines no __len__: its length is known only once "
            "a pass is read.")


def stable_index_span(source: Any) -> int | None:
    """How many stable indices ``source``'s records take (all in ``[0, span)``): its
    ``stable_index_span()`` where it has one, else its length. None: unknown or unbounded.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> import numpy as np
        >>> stable_index_span(MemorySource(MemorySourceConfig(), {"x": np.arange(5)}))
        5
    """
    says = getattr(source, "stable_index_span", None)
    return says() if callable(says) else length_or_none(source)


def stable_index_bound(source: Any) -> int | None:
    """A bound on ``source``'s stable indices: its ``stable_index_bound()`` where it has
    one, else :func:`stable_index_span`. None: unbounded or unknown.

    Example:
        >>> from datarax.sources import FlatMapSource, MemorySource, MemorySourceConfig
        >>> import numpy as np
        >>> parent = MemorySource(MemorySourceConfig(), {"x": np.arange(5)})
        >>> stable_index_bound(FlatMapSource(parent, lambda r: [r], max_outputs=3))
        15
    """
    says = getattr(source, "stable_index_bound", None)
    return says() if callable(says) else stable_index_span(source)


def wide_stable_indices(source: Any) -> bool:
    """Whether ``source`` may number a record ``2**32`` or more: its keys then take both
    words of the index (:func:`~datarax.core.keys.index_words`).

    Example:
        >>> from datarax.sources import FlatMapSource, MemorySource, MemorySourceConfig
        >>> import numpy as np
        >>> parent = MemorySource(MemorySourceConfig(), {"x": np.arange(5)})
        >>> wide_stable_indices(parent), wide_stable_indices(
        ...     FlatMapSource(parent, lambda r: [r], max_outputs=2**31))
        (False, True)
    """
    bound = stable_index_bound(source)
    return bound is None or bound > 2**32


class LengthIfKnown:
    """Mixin of a source whose length may be unknown before it is read: ``len()`` is
    :meth:`length_or_reason`'s count, or ``TypeError`` with its reason; ``bool()`` is True.

    Example:
        >>> class Endless(LengthIfKnown):
        ...     def length_or_reason(self):
        ...         return "it never ends"
        >>> bool(Endless()), length_or_none(Endless())
        (True, None)
        >>> len(Endless())
        Traceback (most recent call last):
        ...
        TypeError: Endless has no length: it never ends
    """

    def __bool__(self) -> bool:
        return True  # without this, bool() would ask len()

    def __len__(self) -> int:
        length = self.length_or_reason()
        if isinstance(length, str):
            raise TypeError(f"{type(self).__name__} has no length: {length}")
        return length

    def length_or_reason(self) -> int | str:  # pragma: no cover - abstract
        """The number of records of an epoch, or why it is not known before reading."""
        raise NotImplementedError
