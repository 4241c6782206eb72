"""``SourcePosition``: where a source is — the one copy of a read position in datarax.

Invariant: a source's position counts what its *consumer has received* (records handed
out of pass ``epoch``), never what read-ahead threads or a prefetch queue have read.
It lives in ``nnx.Variable`` attributes holding 0-d NumPy arrays, so ``nnx.state(source)``
(and ``nnx.state(pipeline)``) carries it, Orbax saves it, and ``nnx.update`` restoring it
resumes the source. Its state dict is the documented
``{"current_index": ..., "current_epoch": ...}`` pair.

Example:
    >>> pos = SourcePosition()
    >>> pos.advance(3); pos.index, pos.epoch
    (3, 0)
    >>> pos.move(1, 0); pos.get_state()
    {'current_index': 0, 'current_epoch': 1}
    >>> pos.seek(0, 2); pos.where(), pos.restores
    ((0, 2), 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import nnx

from datarax.core.errors import StateError
from datarax.core.module import HostState


def _scalar(value: int) -> np.ndarray:
    return np.asarray(int(value), dtype=np.int64)


class _Seeks(HostState):
    """How many times a position was set from outside (never state)."""

    def __init__(self) -> None:
        self.count = 0


class SourcePosition(nnx.Module):
    """Which pass over a source is running and how many records it has handed out."""

    def __init__(self, epoch: int = 0, index: int = 0) -> None:
        self.epoch_var = nnx.Variable(_scalar(epoch))
        self.index_var = nnx.Variable(_scalar(index))
        self.__seeks = _Seeks()

    # The raw accessors: the position is read and moved on the host, outside any trace,
    # once per batch; get_value/set_value add more tracing checks.
    @property
    def epoch(self) -> int:
        return int(self.epoch_var.get_raw_value())

    @property
    def index(self) -> int:
        return int(self.index_var.get_raw_value())

    def where(self) -> tuple[int, int]:
        """``(epoch, index)`` in one read (once per batch, on the consumer's thread)."""
        return int(self.epoch_var.get_raw_value()), int(self.index_var.get_raw_value())

    def advance(self, count: int) -> None:
        """Count ``count`` more records as handed out in this pass."""
        self.index_var.set_raw_value(_scalar(self.index + int(count)))

    def move(self, epoch: int, index: int) -> None:
        """Stand at record ``index`` of pass ``epoch``."""
        self.epoch_var.set_raw_value(_scalar(epoch))
        self.index_var.set_raw_value(_scalar(index))

    def seek(self, epoch: int, index: int) -> None:
        """Stand at record ``index`` of pass ``epoch``, set from outside the reading
        (a restore or a seek): counted in :attr:`restores`."""
        self.move(epoch, index)
        self.__seeks.count += 1

    @property
    def restores(self) -> int:
        """How many times the position was set from outside (:meth:`seek`); a reader
        that left the position somewhere tells by it whether anyone moved it since."""
        return self.__seeks.count

    def get_state(self) -> dict[str, int]:
        return {"current_index": self.index, "current_epoch": self.epoch}

    def check_state(
        self, state: dict[str, Any], *, length: int | None = None, where: str = "source"
    ) -> tuple[int, int]:
        """``(epoch, index)`` of a :meth:`get_state` dict, refusing missing or impossible values."""
        for key in ("current_index", "current_epoch"):
            if key not in state:
                raise StateError(
                    f"{where} state is missing '{key}'; pass the dict that get_state() "
                    f"returned (keys: {sorted(state)}).",
                    field=key,
                )
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise StateError(
                    f"{where} state '{key}' must be a non-negative int, got {value!r}; "
                    "the state was tampered with or comes from elsewhere.",
                    field=key,
                )
        if length is not None and state["current_index"] > length:
            raise StateError(
                f"{where} state current_index={state['current_index']} is past the end of "
                f"the source ({length} records); the state comes from a different dataset.",
                field="current_index",
            )
        return int(state["current_epoch"]), int(state["current_index"])
