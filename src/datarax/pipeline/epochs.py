"""Iterators over part of a pass or over several passes: ``take``, ``skip``, ``repeat``.

Each wraps the pipeline's own passes (``iter(pipeline)``), so a shuffled source still
changes its order every epoch and per-record keys still fold in the epoch. Their state
is the pipeline's state plus one count (batches or passes left), so a resume is exact
and the state stays small.
"""

from __future__ import annotations

from typing import Any

from datarax.core.errors import ConfigError, StateError
from datarax.typing import Batch


def check_count(value: Any, what: str, allow_none: bool = False) -> None:
    """Refuse a count that is not an int >= 0 (or None when ``allow_none``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"Pipeline.{what} takes an int >= 0, got {value!r}.")


class Take:
    """At most ``batches`` batches of the pipeline's next pass (see ``Pipeline.take``)."""

    def __init__(self, pipeline: Any, batches: int) -> None:
        check_count(batches, "take")
        self._pipeline, self._left = pipeline, batches
        self._iterator: Any = None

    def __iter__(self) -> Take:
        return self

    def __next__(self) -> Batch:
        if self._left <= 0:
            raise StopIteration
        if self._iterator is None:
            self._iterator = iter(self._pipeline)
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._left = 0  # the pass ended first: a state taken now resumes to the end
            raise
        self._left -= 1
        return batch

    def get_state(self) -> dict[str, Any]:
        """The pipeline's state and the batches still to take."""
        return {"pipeline": self._pipeline.get_state(), "take_left": self._left}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline)."""
        if not isinstance(state, dict) or "take_left" not in state:
            raise StateError("Take.set_state expects a state from Take.get_state().")
        self._pipeline.set_state(state["pipeline"])
        self._left, self._iterator = int(state["take_left"]), None


class Repeat:
    """The batches of ``epochs`` passes in a row (``None``: without end); see
    ``Pipeline.repeat``."""

    def __init__(self, pipeline: Any, epochs: int | None) -> None:
        check_count(epochs, "repeat", allow_none=True)
        self._pipeline, self._left = pipeline, epochs
        self._iterator: Any = None
        self._served = False  # the current pass handed out a batch
        self._whole = False  # the current pass began at its epoch's start

    def __iter__(self) -> Repeat:
        return self

    def __next__(self) -> Batch:
        empty = 0
        while self._left is None or self._left > 0:
            if self._iterator is None:
                self._iterator, self._served = iter(self._pipeline), False
                # a pass begun at its epoch's start (not the rest of a restored one)
                self._whole = self._pipeline.position == 0
            try:
                batch = next(self._iterator)
            except StopIteration:
                empty = empty + 1 if self._whole and not self._served else 0
                self._iterator = None
                if self._left is not None:
                    self._left -= 1
                if empty >= 2:
                    raise StopIteration(
                        f"{type(self._pipeline.source).__name__} served two empty passes in "
                        "a row (every record filtered out?): repeat() stops rather than "
                        "loop without end."
                    ) from None
                continue
            self._served = True
            return batch
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        """The pipeline's state and the passes still to serve (the current one included)."""
        return {"pipeline": self._pipeline.get_state(), "epochs_left": self._left}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline)."""
        if not isinstance(state, dict) or "epochs_left" not in state:
            raise StateError("Repeat.set_state expects a state from Repeat.get_state().")
        self._pipeline.set_state(state["pipeline"])
        left = state["epochs_left"]
        self._left, self._iterator = None if left is None else int(left), None
