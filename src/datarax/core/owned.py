"""Host arrays put on a device as datarax's own copies: the caller's buffer stays theirs.

**Invariant.** A device array that datarax builds from a caller's host buffer (a
MemorySource's columns, a host source's batch) holds the buffer's values *at the
call*: changing the buffer afterwards, or handing datarax the same buffer again
refilled, does not change an array datarax holds or has handed out.

Why it needs saying: ``jax.device_put`` of a NumPy array returns before it has read
the buffer, and JAX asks that the buffer not change until it has (JAX 0.10: the
transfer runs in the background; a 1 MB array changed at once arrived half changed).
On the CPU backend it does not even copy a buffer whose data is 64-byte aligned (arrays
from Arrow, torch and aligned allocators often are): it shares it for the device
array's lifetime, and ``may_alias=False`` does not change that for NumPy input.

So :func:`owned_device_put` hands JAX a private NumPy copy, which JAX may share or read
whenever it likes (on the CPU a 64-byte aligned one from 128 KiB on, so that JAX shares
it rather than copying it again: JAX's own copy of an unaligned buffer is slower than
NumPy's, 3 MB: 0.84 ms against 0.17 ms). From 64 MiB on (a MemorySource's columns)
NumPy is slow to fill fresh memory (553 MB in a new process on a 2-core VM: 1.7-5 s,
against 0.43 s for JAX's copy), so for one CPU device on Linux the copy goes into memory
whose pages the kernel puts in place up front (``MAP_POPULATE``, 0.21-0.36 s; with two
CPUs free, two halves side by side), which JAX shares; elsewhere datarax waits for JAX's
own copy. :func:`unshared` gives a private copy for JAX's
other ways in (``jax.make_array_from_process_local_data``). JAX arrays are immutable
and pass as ``jax.device_put`` would place them. An array datarax allocated itself
(:func:`fresh_aligned`, in :mod:`datarax.host.arrays`: no JAX there), filled once and :func:`seal` ed (a reader's decoded batch) is no
caller's buffer and is never written again: it passes as it is. ``tests/core/test_owned.py`` checks
the alignment rule against the installed JAX.

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

# fresh_aligned / seal live with the other host arrays (no JAX there: decode workers use them)
from datarax.host.arrays import (  # noqa: F401
    CPU_SHARED_ALIGNMENT, aligned_copy, fresh_aligned, is_sealed, seal)

# From this size on, a private copy for the CPU is made 64-byte aligned (JAX shares it).
ALIGNED_COPY_BYTES = 128 * 1024
# From this size on, datarax waits for JAX's copy instead of making a private one.
WAITED_COPY_BYTES = 64 * 1024 * 1024


def owned_device_put(value: Any, device: Any = None) -> Any:
    """``jax.device_put(value, device)`` holding ``value``'s values at the call, never
    sharing or later reading the caller's host buffer.

    ``value``: one array (NumPy or JAX) or anything ``np.asarray`` takes; ``device``:
    a device or sharding (default: JAX's default device).
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
    """:func:`owned_device_put` of each of ``values``, datarax's own sealed arrays (a
    reader's batches) put by one ``jax.device_put`` call: the same arrays, one call's
    overhead (on the CPU ~75 us an array alone, ~36 us each in a call of 8)."""
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
    """A C-contiguous copy of ``array`` in anonymous memory the kernel maps up front
    (its pages put in place before they are written), page aligned so that JAX's CPU
    client shares it; None where the platform has no ``MAP_POPULATE`` (not Linux) or
    the mapping fails.

    Why: a large copy's cost is mostly faulting its fresh pages in one by one. A
    553 MB array on a 2-core VM: JAX's own copy 0.43-0.48 s, this 0.21-0.36 s (NumPy's
    copy into ``np.empty``: 3.8-5.7 s). With two CPUs free the two halves are mapped
    and copied side by side (:func:`_copy_in_halves`). The mapping lives as long as
    the NumPy array over it, which JAX keeps for the device array's lifetime.
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
    """libc's ``madvise`` through ctypes (which lets other threads run while it
    works, unlike ``mmap.madvise``), or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _copy_in_halves(out: np.ndarray, array: np.ndarray) -> None:
    """Copy ``array`` into ``out`` (fresh, unpopulated anonymous memory) as two halves
    on two threads, each first having the kernel put its pages in place
    (``MADV_POPULATE_WRITE``; where the kernel refuses, the copy faults them in). The
    copy is complete when this returns."""
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
