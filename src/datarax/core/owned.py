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

So :func:`owned_device_put` either hands JAX a private copy (small arrays: a NumPy
copy, ~1 us) or waits for JAX's own copy to finish (large ones; for a buffer JAX would
share, a copy made on the device from the shared view). One copy in all, either way.
:func:`unshared` gives a private copy for JAX's other ways in
(``jax.make_array_from_process_local_data``). JAX arrays are immutable and pass as
``jax.device_put`` would place them. ``tests/core/test_owned.py`` checks the alignment
rule against the installed JAX.

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
# Below this many bytes datarax copies with NumPy; from it on JAX (or the device) does
# the copy and datarax waits for it: NumPy is slow to fill fresh memory (553 MB in a new
# process on a 2-core VM: 1.7-5 s, against 0.43 s for JAX's copy and 0.2 s for a device
# copy of a shared buffer), and a device copy costs ~60 us of dispatch.
DEVICE_COPY_BYTES = 1 << 20


def owned_device_put(value: Any, device: Any = None) -> Any:
    """``jax.device_put(value, device)`` holding ``value``'s values at the call, never
    sharing or later reading the caller's host buffer.

    ``value``: one array (NumPy or JAX) or anything ``np.asarray`` takes; ``device``:
    a device or sharding (default: JAX's default device).
    """
    if isinstance(value, jax.Array):
        return jax.device_put(value, device)
    array = np.asarray(value)
    if array.nbytes < DEVICE_COPY_BYTES:
        return jax.device_put(array.copy(), device)  # private: JAX may read it when it likes
    if array.ctypes.data % CPU_SHARED_ALIGNMENT == 0 and _on_cpu(device):
        return jax.block_until_ready(jax.device_put(array, device).copy())
    return jax.block_until_ready(jax.device_put(array, device))


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
