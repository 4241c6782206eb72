"""Batch arrays datarax allocates itself: 64-byte aligned, filled once, then sealed.

A sealed array has no other holder, so :func:`datarax.core.owned.owned_device_put`
hands it to JAX without a copy. Imports neither JAX nor Flax (decode workers use it).

Example:
    >>> import numpy as np
    >>> out = fresh_aligned((2, 3), np.float32)
    >>> out[:] = 1.0
    >>> sealed = seal(out)
    >>> sealed.ctypes.data % CPU_SHARED_ALIGNMENT, sealed.flags.writeable, is_sealed(sealed[1:])
    (0, False, True)
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["CPU_SHARED_ALIGNMENT", "aligned_copy", "fresh_aligned", "is_sealed", "own_buffer",
           "seal"]

# JAX's CPU client shares (does not copy) host buffers whose address is a multiple of this.
CPU_SHARED_ALIGNMENT = 64

# Buffers made by fresh_aligned that are still alive, by id (the value confirms identity).
_OWN_BUFFERS: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def fresh_aligned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new 64-byte aligned array for datarax to fill once and then :func:`seal`."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + CPU_SHARED_ALIGNMENT, np.uint8)
    _OWN_BUFFERS[id(raw)] = raw
    start = -raw.ctypes.data % CPU_SHARED_ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous, not yet sealed copy of ``array`` in a :func:`fresh_aligned` buffer."""
    out = fresh_aligned(array.shape, array.dtype)
    np.copyto(out, array)
    return out


def seal(array: np.ndarray) -> np.ndarray:
    """Make ``array`` and its memory read-only and return it; ``ValueError`` if
    :func:`fresh_aligned` did not make it."""
    owner = own_buffer(array)
    if owner is None:
        raise ValueError("seal: the array's memory was not allocated by fresh_aligned.")
    owner.flags.writeable = False
    array.flags.writeable = False
    return array


def own_buffer(array: np.ndarray) -> np.ndarray | None:
    """The :func:`fresh_aligned` buffer under ``array`` (a view's base chain), or None."""
    base: Any = array
    while isinstance(base, np.ndarray):
        if _OWN_BUFFERS.get(id(base)) is base:
            return base
        base = base.base
    return None


def is_sealed(array: np.ndarray) -> bool:
    """Whether ``array`` is (a view of) a :func:`seal` ed :func:`fresh_aligned` array."""
    if array.flags.writeable:
        return False
    owner = own_buffer(array)
    return owner is not None and not owner.flags.writeable
