"""Host arrays put on a device as datarax's own copies: the caller's buffer stays theirs.

**Invariant.** A device array datarax builds from a caller's host buffer holds the
buffer's values *at the call*: changing or refilling the buffer afterwards changes
nothing datarax holds or has handed out (why: docs/architecture.md, "The caller's
buffers stay theirs"; ``jax.device_put`` reads the buffer later, and on the CPU shares
a 64-byte aligned one).

:func:`owned_device_put` hands JAX a private copy (aligned from ``ALIGNED_COPY_BYTES``
on, so JAX shares it rather than copying again); large arrays are copied into memory
mapped up front or waited for. Arrays datarax allocated and :func:`seal` ed pass as they
are. :func:`unshared` gives a private copy for JAX's other ways in.

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

import ctypes
import mmap
import os
import threading
from typing import Any

import jax
import numpy as np

from datarax.host.arrays import (  # noqa: F401
    CPU_SHARED_ALIGNMENT, aligned_copy, fresh_aligned, is_sealed, seal)

# From this size on, a private copy for the CPU is made 64-byte aligned (JAX shares it).
ALIGNED_COPY_BYTES = 128 * 1024
# From this size on, datarax waits for JAX's copy instead of making a private one.
WAITED_COPY_BYTES = 64 * 1024 * 1024


def owned_device_put(value: Any, device: Any = None) -> Any:
    """``jax.device_put(value, device)`` holding ``value``'s values at the call, never
    sharing or later reading the caller's host buffer (``device``: a device or sharding).
    """
    if isinstance(value, jax.Array):
        return jax.device_put(value, device)
    array = np.asarray(value)
    if is_sealed(array) and (array.ctypes.data % CPU_SHARED_ALIGNMENT == 0 or not _on_cpu(device)):
        return jax.device_put(array, device)  # datarax's own, never written again
    if array.nbytes < ALIGNED_COPY_BYTES:
        return jax.device_put(array.copy(), device)
    on_cpu = _on_cpu(device)
    if array.nbytes < WAITED_COPY_BYTES:
        return jax.device_put(aligned_copy(array) if on_cpu else array.copy(), device)
    if on_cpu and _one_device(device):
        populated = _populated_copy(array)
        if populated is not None:  # JAX shares it: one copy, into memory mapped up front
            return jax.device_put(populated, device)
    if on_cpu and array.ctypes.data % CPU_SHARED_ALIGNMENT == 0:  # JAX would share it
        return jax.block_until_ready(jax.device_put(array, device).copy())
    return jax.block_until_ready(jax.device_put(array, device))


def owned_device_put_all(values: list[Any], device: Any = None) -> list[Any]:
    """:func:`owned_device_put` of each of ``values``, sealed arrays put by one
    ``jax.device_put`` call (less overhead per array)."""
    out: list[Any] = [None] * len(values)
    own: list[np.ndarray] = []
    slots: list[int] = []
    on_cpu: bool | None = None
    for slot, value in enumerate(values):
        if isinstance(value, np.ndarray) and is_sealed(value):
            if on_cpu is None:
                on_cpu = _on_cpu(device)
            if value.ctypes.data % CPU_SHARED_ALIGNMENT == 0 or not on_cpu:
                own.append(value)
                slots.append(slot)
                continue
        out[slot] = owned_device_put(value, device)
    if own:
        for slot, array in zip(slots, jax.device_put(own, device)):
            out[slot] = array
    return out


def unshared(value: Any) -> np.ndarray:
    """A private copy of ``value`` for JAX to place as it likes (share or read later)."""
    return np.array(value, copy=True)


def _on_cpu(device: Any) -> bool:
    if device is None:
        default = jax.config.jax_default_device
        device = default if default is not None else jax.devices()[0]
    if isinstance(device, str):  # a platform name
        return device == "cpu"
    devices = getattr(device, "device_set", None) or [device]
    return any(getattr(d, "platform", "cpu") == "cpu" for d in devices)


def _one_device(device: Any) -> bool:
    """Whether ``device`` (None, a device, a platform name or a sharding) names one device."""
    devices = getattr(device, "device_set", None)
    return devices is None or len(devices) == 1


def _populated_copy(array: np.ndarray) -> np.ndarray | None:
    """A copy of ``array`` in page-aligned anonymous memory mapped up front
    (``MAP_POPULATE``: a large copy's cost is mostly faulting fresh pages), which JAX's
    CPU client shares; None without ``MAP_POPULATE`` or where the mapping fails.
    """
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None or array.nbytes == 0:
        return None
    halves = array.ndim > 0 and array.shape[0] >= 2 and _free_cpus() >= 2
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    try:
        memory = mmap.mmap(-1, array.nbytes, flags=flags if halves else flags | populate)
    except (OSError, ValueError):
        return None
    out = np.frombuffer(memory, np.uint8).view(array.dtype).reshape(array.shape)
    if halves:
        _copy_in_halves(out, array)
    else:
        np.copyto(out, array)
    return out


# madvise(2) advice that puts every page of a range in place, writable (Linux 5.14).
_MADV_POPULATE_WRITE = 23


def _free_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _madvise() -> Any:
    """libc's ``madvise`` through ctypes (it releases the GIL, unlike ``mmap.madvise``), or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _copy_in_halves(out: np.ndarray, array: np.ndarray) -> None:
    """Copy ``array`` into fresh anonymous ``out`` as two halves on two threads, each
    populating its pages first (``MADV_POPULATE_WRITE``)."""
    madvise = _madvise()
    page = mmap.PAGESIZE
    split = array.shape[0] // 2
    cut = split * (out.nbytes // out.shape[0])
    base = out.ctypes.data
    errors: list[BaseException] = []

    def half(rows: slice, lo: int, hi: int) -> None:
        try:
            if madvise is not None and hi > lo:
                madvise(base + lo, hi - lo, _MADV_POPULATE_WRITE)  # a refusal: faulted below
            np.copyto(out[rows], array[rows])
        except BaseException as err:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(err)

    other = threading.Thread(target=half, args=(slice(split, None), cut // page * page,
                                                out.nbytes), name="datarax-copy")
    other.start()
    half(slice(None, split), 0, cut)
    other.join()
    if errors:
        raise errors[0]
