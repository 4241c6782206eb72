"""Counts given as arguments (threads, sizes, limits), checked without importing JAX.

Example:
    >>> import numpy as np
    >>> check_count(np.int64(4), "num_threads", 1)
    4
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.errors import ConfigError

__all__ = ["check_count", "python_ints"]


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
