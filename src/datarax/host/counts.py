"""Counts: given as arguments (threads, sizes, limits), checked without importing JAX; and
worded in messages with a plural that fits (``1 record``, ``3 records``).

Example:
    >>> import numpy as np
    >>> check_count(np.int64(4), "num_threads", 1)
    4
    >>> count_words(1, "record")
    '1 record'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.errors import ConfigError

__all__ = ["check_count", "count_words", "python_ints"]


def check_count(value: Any, what: str, minimum: int, hint: str = "") -> int:
    """``value`` as a Python int >= ``minimum`` (a NumPy integer as the same int); else
    :class:`ConfigError` naming ``what``.

    >>> check_count(np.int64(4), "num_threads", 1)
    4
    """
    value = python_ints(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{what} must be an int >= {minimum}{hint}, got {value!r}.")
    return value


def count_words(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1: ``1 shard``, ``3 records``; ``plural``
    where it is not ``word`` + ``s``.

    >>> count_words(1, "shard"), count_words(0, "row"), count_words(3, "record")
    ('1 shard', '0 rows', '3 records')
    >>> count_words(1, "process", "processes"), count_words(2, "batch", "batches")
    ('1 process', '2 batches')
    """
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def python_ints(value: Any) -> Any:
    """``value`` with every NumPy integer in it (also inside dicts, lists, tuples) a Python int.

    >>> python_ints((np.int64(2), {"at": [np.int32(3)]}, 1.5))
    (2, {'at': [3]}, 1.5)
    """
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {k: python_ints(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(python_ints(v) for v in value)
    return value
