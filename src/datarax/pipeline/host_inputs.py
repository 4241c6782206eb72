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
        self._made: list[tuple[Any, Any]] = []  # (an original, its copy) of the last call

    def on(self, inputs: Any, device: Any) -> Any:
        """``inputs`` on ``device``: a copy of each array not copied by the last call (an
        epoch's order table is new each pass; the columns are copied once)."""
        leaves, tree = jax.tree.flatten(inputs)
        with self._lock:
            known = self._made
            copies = []
            for leaf in leaves:
                copy = next((c for original, c in known if original is leaf), None)
                copies.append(jax.device_put(leaf, device) if copy is None else copy)
            self._made = list(zip(leaves, copies))
            return jax.tree.unflatten(tree, copies)
