"""Host arrays put on a device as datarax's own copies: the caller's buffer stays theirs.

**Invariant.** A device array that datarax builds from a caller's host buffer (a
MemorySource's columns, a host source's batch) never shares that buffer: changing
the buffer afterwards, or handing datarax the same buffer again refilled, does not
change an array datarax holds or has handed out.

Why it needs saying: on the CPU backend ``jax.device_put`` *aliases* a NumPy array
whose data is 64-byte aligned instead of copying it (arrays from Arrow, torch and
aligned allocators often are; NumPy's own large arrays usually are not), so whether a
later in-place change leaked into the device array would depend on an address (and
``device_put(..., may_alias=False)`` does not change that for NumPy input, JAX 0.10).
:func:`owned_device_put` copies such a buffer on the device (from JAX's shared view,
waited for: still one copy in all), and :func:`unshared` into an aligned NumPy buffer
of its own for JAX's other ways in; buffers JAX copies anyway, and every transfer to
a non-CPU device, go as they are. (JAX's copy is kept where it happens anyway: into
fresh memory it beat a NumPy copy, 0.43 s against 1.7-5 s for 553 MB in a new process
on a 2-core VM, though NumPy wins into recycled memory.) JAX arrays are immutable and
pass as ``jax.device_put`` would place them. ``tests/core/test_owned.py`` checks the
alignment rule against the installed JAX.

Example:
    >>> import numpy as np
    >>> raw = np.empty(64 + 16 * 4, np.uint8)
    >>> start = -raw.ctypes.data % 64
    >>> host = raw[start:start + 16 * 4].view(np.float32)  # 64-byte aligned
    >>> host[:] = 1.0
    >>> device = owned_device_put(host)
    >>> host[:] = -1.0  # the caller reuses their buffer
    >>> float(device.sum())
    16.0
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


# JAX's CPU client shares (does not copy) host buffers whose address is a multiple of this.
CPU_SHARED_ALIGNMENT = 64


def owned_device_put(value: Any, device: Any = None) -> Any:
    """``jax.device_put(value, device)``, never sharing the caller's host buffer.

    ``value``: one array (NumPy or JAX) or anything ``np.asarray`` takes; ``device``:
    a device or sharding (default: JAX's default device).
    """
    if isinstance(value, jax.Array):
        return jax.device_put(value, device)
    array = np.asarray(value)
    if _shared_by_jax(array, device):
        # A copy made on the device, from JAX's shared view, finished before we return
        # (the caller may change the buffer next). JAX's allocator fills fresh memory
        # far faster than a NumPy copy does (553 MB: 0.2 s against 1.7-5 s in a new
        # process on a 2-core VM).
        return jax.block_until_ready(jax.device_put(array, device).copy())
    return jax.device_put(array, device)


def unshared(value: Any, device: Any = None) -> np.ndarray:
    """``value`` as a NumPy array JAX will not share with the caller when placing it on
    ``device``: the array itself where JAX copies anyway, else a fresh aligned copy.
    For JAX's other ways in (``jax.make_array_from_process_local_data``).
    """
    array = np.asarray(value)
    return _aligned_copy(array) if _shared_by_jax(array, device) else array


def _shared_by_jax(array: np.ndarray, device: Any) -> bool:
    return bool(array.nbytes) and array.ctypes.data % CPU_SHARED_ALIGNMENT == 0 and _on_cpu(device)


def _on_cpu(device: Any) -> bool:
    if device is None:
        default = jax.config.jax_default_device
        device = default if default is not None else jax.devices()[0]
    if isinstance(device, str):  # a platform name
        return device == "cpu"
    devices = getattr(device, "device_set", None) or [device]
    return any(getattr(d, "platform", "cpu") == "cpu" for d in devices)


def _aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` in a fresh buffer aligned for JAX to share."""
    raw = np.empty(array.nbytes + CPU_SHARED_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % CPU_SHARED_ALIGNMENT
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out
