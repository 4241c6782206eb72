"""What one indexed pass leaves to the next pass of the same pipeline.

Starting a pass costs host time a short epoch pays at every switch. :class:`PassReuse`
keeps from the last pass the compiled steps and bound executables (while the graph
definition, argument signature and JAX settings are unchanged), the state's leaves on
the device (each while its host value is unchanged), and the ended pass's read-ahead
worker (:meth:`PassReuse.park`). A pass thus runs with exactly the arguments a fresh one
would build: the graph is split again every pass; only its placement is reused.

Example:
    >>> import numpy as np
    >>> reuse = PassReuse()
    >>> first = reuse.constants("graph", {"seed": np.uint32(3)}, (np.zeros(2, np.uint32),), np.int32(0))
    >>> again = reuse.constants("graph", {"seed": np.uint32(3)}, (np.zeros(2, np.uint32),), np.int32(1))
    >>> again[0]["seed"] is first[0]["seed"], int(again[2]), reuse.same
    (True, 1, True)
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.compiled_store import signature as compiled_signature
from datarax.core.step_cache import step_split
from datarax.pipeline.ahead import DispatchAhead

#: host leaves up to this many elements are compared by value (and kept as copies);
#: larger ones are placed again each pass unless they are the same JAX array
COMPARE_MAX = 4096


def _host_copy(leaf: Any) -> Any:
    """What a leaf is compared by next pass: a copy of a small NumPy value (written in
    place), a JAX array itself, else None."""
    if isinstance(leaf, jax.Array):
        return leaf
    if isinstance(leaf, (np.ndarray, np.generic)) and np.size(leaf) <= COMPARE_MAX:
        return np.array(leaf, copy=True)
    return None


def _unchanged(leaf: Any, kept: Any) -> bool:
    """Whether ``leaf`` is the value ``kept`` (a :func:`_host_copy`) was taken of."""
    if kept is None:
        return False
    if isinstance(kept, jax.Array):
        return leaf is kept
    return (isinstance(leaf, (np.ndarray, np.generic)) and np.shape(leaf) == kept.shape
            and np.asarray(leaf).dtype == kept.dtype and np.array_equal(leaf, kept))


class PlacedLeaves:
    """The leaves of a tree the last call of :meth:`on` put on a device, each reused
    while unchanged (a small NumPy value by equality, a JAX array by identity).

    Example:
        >>> import jax
        >>> copies, cpu = PlacedLeaves(), jax.local_devices(backend="cpu")[0]
        >>> columns = {"x": jax.numpy.arange(3)}
        >>> copies.on(columns, cpu)[0]["x"] is copies.on(columns, cpu)[0]["x"]
        True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list[Any] = []  # per leaf: what it is compared by
        self._placed: list[Any] = []  # per leaf: it on the device

    def on(self, tree: Any, device: Any, fresh: Any = (), reuse: bool = True) -> tuple[Any, Any]:
        """``(tree, fresh)`` on ``device``, reusing ``tree``'s unchanged leaves (where
        ``reuse``); ``fresh`` is placed anew."""
        leaves, structure = jax.tree.flatten(tree)
        with self._lock:
            if not reuse or len(leaves) != len(self._kept):
                self._kept, self._placed = [None] * len(leaves), [None] * len(leaves)
            changed = [i for i, leaf in enumerate(leaves) if not _unchanged(leaf, self._kept[i])]
            placed_changed, fresh = jax.device_put(([leaves[i] for i in changed], fresh), device)
            for i, value in zip(changed, placed_changed):
                self._kept[i] = _host_copy(leaves[i])
                self._placed[i] = value
            return jax.tree.unflatten(structure, list(self._placed)), fresh


class PassReuse:
    """The last indexed pass's placed constants and compiled steps (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._signature: Any = None
        self._state = PlacedLeaves()  # the state's leaves on the device
        self.same = False  # whether the last call found the last pass's signature
        #: compiled steps by key (("indexed", size), ...) and step -> bound executable,
        #: valid while ``same``
        self.steps: dict[Any, Any] = {}
        self.bound: dict[Any, Any] = {}
        self._parked: DispatchAhead | None = None
        self._split: tuple[Any, Any] | None = None  # the last pass's graph, its step graph

    def split(self, tree: Any) -> tuple[Any, Any]:
        """:func:`~datarax.core.step_cache.split_for_step` of ``tree``, its step graph
        definition reused while the graph is unchanged (a pass start skips the twin)."""
        with self._lock:
            last = self._split
        graphdef, step_graphdef, state = step_split(tree, last)
        with self._lock:
            self._split = (graphdef, step_graphdef)
        return step_graphdef, state

    def park(self, worker: DispatchAhead) -> None:
        """Keep the worker of a pass that ended for the next pass (see the module)."""
        with self._lock:
            old, self._parked = self._parked, worker
        if old is not None:
            old.stop()

    def parked(self) -> DispatchAhead | None:
        """The parked worker, taken (None if there is none)."""
        with self._lock:
            worker, self._parked = self._parked, None
        return worker

    def constants(self, graphdef: Any, state: Any, key: Any, epoch: Any,
                  device: Any = None, inputs: Any = None) -> tuple[Any, Any, Any]:
        """``(state, key, epoch)`` on ``device`` as
        :func:`~datarax.pipeline.steps.pass_constants` makes them, reusing unchanged
        leaves; ``same`` says whether the last pass's steps still apply."""
        plain = nnx.to_pure_dict(state) if isinstance(state, nnx.State) else state
        signature = (graphdef, device, compiled_signature((plain, key, inputs)))
        with self._lock:
            self.same = self._signature is not None and self._signature == signature
            if not self.same:
                self._signature, self.steps, self.bound = signature, {}, {}
            placed, (key, epoch) = self._state.on(plain, device, (key, epoch), reuse=self.same)
            return placed, key, epoch

    def step(self, name: Any, make: Any) -> Any:
        """The compiled step ``name`` found by the last pass, else ``make()`` (kept)."""
        found = self.steps.get(name)
        if found is None:
            found = self.steps[name] = make()
        return found
