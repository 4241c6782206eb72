"""``EpochPosition``: the one (epoch, index) cursor every stateful source reuses.

It lives in ``nnx.Variable`` attributes so ``nnx.state(source)`` sees it, and its
state dict is the documented ``{"current_index": ..., "current_epoch": ...}`` pair.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from datarax.core.errors import StateError


class EpochPosition(nnx.Module):
    """Which pass over a source is running and how many records it has handed out.

    Example:
        >>> pos = EpochPosition()
        >>> pos.advance(3); pos.index, pos.epoch
        (3, 0)
        >>> pos.start_epoch(1); pos.get_state()
        {'current_index': 0, 'current_epoch': 1}
    """

    def __init__(self, epoch: int = 0, index: int = 0) -> None:
        self.current_epoch = nnx.Variable(int(epoch))
        self.current_index = nnx.Variable(int(index))

    @property
    def epoch(self) -> int:
        return int(self.current_epoch.get_value())

    @property
    def index(self) -> int:
        return int(self.current_index.get_value())

    def advance(self, count: int) -> None:
        """Count ``count`` more records as handed out in this epoch."""
        self.current_index.set_value(self.index + int(count))

    def start_epoch(self, epoch: int) -> None:
        """Move to the start of pass ``epoch``."""
        self.current_epoch.set_value(int(epoch))
        self.current_index.set_value(0)

    def get_state(self) -> dict[str, int]:
        return {"current_index": self.index, "current_epoch": self.epoch}

    def set_state(self, state: dict[str, Any], *, length: int | None = None, where: str = "source") -> None:
        """Restore from :meth:`get_state` output, refusing missing or impossible values."""
        for key in ("current_index", "current_epoch"):
            if key not in state:
                raise StateError(
                    f"{where} state is missing '{key}'; pass the dict that get_state() "
                    f"returned (keys: {sorted(state)}).",
                    field=key,
                )
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
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
        self.current_epoch.set_value(int(state["current_epoch"]))
        self.current_index.set_value(int(state["current_index"]))
