"""Type aliases used across datarax's public API."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

Batch = dict[str, Any]
"""A batch: field name -> array with a leading record axis (or a list of str)."""

Spec = dict[str, Any]
"""Per-record spec: field name -> ``jax.ShapeDtypeStruct`` or ``TextSpec``."""

PRNGKey = jax.Array
"""A typed JAX PRNG key."""

IntLike = int | np.integer[Any]
"""A count, size or seed argument: a Python int or a NumPy integer (taken as the same int)."""

__all__ = ["Batch", "IntLike", "PRNGKey", "Spec"]
