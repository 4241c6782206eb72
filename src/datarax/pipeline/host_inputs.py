"""The host copies of an indexed source's step inputs, for ``stages_on="host"``.

A pipeline whose stages run on the host CPU (:mod:`datarax.pipeline.devices`) calls its
compiled step with the source's columns on the CPU device. :class:`HostInputs` makes
that copy once per pipeline (it lives in the pipeline's session) and hands the same
copy to every pass, as long as the source hands out the same arrays.

Example:
    >>> import jax, numpy as np
    >>> copies = HostInputs()
    >>> columns = {"x": jax.numpy.arange(3)}
    >>> cpu = jax.local_devices(backend="cpu")[0]
    >>> copies.on(columns, cpu)["x"] is copies.on(columns, cpu)["x"]
    True
"""

from __future__ import annotations

import threading
from typing import Any

import jax


class HostInputs:
    """The CPU copies of an indexed source's step inputs (its columns), made once per
    pipeline and reused by every pass while the source hands out the same arrays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: tuple[list[Any], Any] | None = None  # (the originals, their copies)

    def on(self, inputs: Any, device: Any) -> Any:
        """``inputs`` on ``device`` (a copy of each array not there yet)."""
        leaves = jax.tree.leaves(inputs)
        with self._lock:
            made = self._made
            if made is not None and len(made[0]) == len(leaves) and all(
                a is b for a, b in zip(made[0], leaves)
            ):
                return made[1]
            copies = jax.device_put(inputs, device)
            self._made = (leaves, copies)
            return copies
