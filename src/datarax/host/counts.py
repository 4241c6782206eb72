"""Counts given as arguments (threads, sizes, limits): a Python int at least a minimum,
a NumPy integer taken as the same int. Imports no JAX, so the storage layer and decode
workers check their arguments as :mod:`datarax.core.config` (which names it) does.

Example:
    >>> import numpy as np
    >>> check_count(np.int64(4), "num_threads", 1)
    4
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.errors import ConfigError

__all__ = ["check_count"]


def check_count(value: Any, what: str, minimum: int, hint: str = "") -> int:
    """``value`` as a Python int >= ``minimum`` (a NumPy integer as the same int), for an
    argument that is not a config field; else :class:`ConfigError` naming ``what``.

    >>> check_count(np.int64(4), "num_threads", 1)
    4
    """
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{what} must be an int >= {minimum}{hint}, got {value!r}.")
    return value
