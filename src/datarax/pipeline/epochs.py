"""Iterators over part of a pass or over several passes: ``take``, ``skip``, ``repeat``.

Each wraps the pipeline's own passes (``iter(pipeline)``), so a shuffled source still
changes its order every epoch and per-record keys still fold in the epoch. Their state
is the pipeline's state plus one count (batches or passes left), so a resume is exact
and the state stays small.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.core.errors import ConfigError, StateError
from datarax.typing import Batch


def check_count(value: Any, what: str, allow_none: bool = False) -> Any:
    """The count ``value`` as an int (a NumPy integer taken as the same int); refuse one
    that is not an int >= 0 (or None when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"Pipeline.{what} takes an int >= 0, got {value!r}.")
    return value


def saved_count(state: dict[str, Any], name: str, where: str, allow_none: bool = False) -> Any:
    """``state[name]``, a count saved by ``get_state()`` (an int >= 0, or None when
    ``allow_none``); anything else is refused naming it."""
    value = state[name]
    if (value is None and allow_none) or (
        not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 0
    ):
        return None if value is None else int(value)
    raise StateError(
        f"{where}.set_state: '{name}' must be an int >= 0{' or None' if allow_none else ''}, "
        f"got {value!r}; pass the dict {where}.get_state() returned.",
        field=name,
    )


class Take:
    """At most ``batches`` batches of the pipeline's next pass (see ``Pipeline.take``).

    Its state is the pipeline's, the count asked for (``take``) and the batches left
    (``take_left``). A take that served its batches leaves the rest of its pass unserved,
    as a ``break`` does: restored from a state taken then (``take_left`` 0), the next
    ``for batch in pipeline`` starts the next epoch, as it does without the restore.
    """

    def __init__(self, pipeline: Any, batches: int, session: Any) -> None:
        self._pipeline, self._left = pipeline, check_count(batches, "take")
        self._count, self._session = self._left, session
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
        """The pipeline's state, the batches asked for and the batches still to take."""
        return {"pipeline": self._pipeline.get_state(), "take": self._count,
                "take_left": self._left}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identical pipeline and an
        identical ``take``: a state of another count is refused)."""
        if not isinstance(state, dict) or "take_left" not in state:
            raise StateError("Take.set_state expects a state from Take.get_state().")
        left = saved_count(state, "take_left", "Take")
        # a state saved before the count was recorded (take_left only) restores as it
        # did then: its take_left wins, this take's count stands in for the saved one
        count = saved_count(state, "take", "Take") if "take" in state else self._count
        if count != self._count:
            raise StateError(
                f"Take.set_state: the state was saved by pipeline.take({count}) "
                f"({left} batch(es) left), but this is pipeline.take({self._count}); the "
                f"batches left count from the saved take. Restore it into "
                f"pipeline.take({count}).",
                field="take",
            )
        if left > count and "take" in state:
            raise StateError(
                f"Take.set_state: 'take_left' is {left}, more than the {count} batch(es) "
                "of the take; the state was tampered with. Pass the dict Take.get_state() "
                "returned.",
                field="take_left",
            )
        self._pipeline.set_state(state["pipeline"])
        self._left, self._iterator = left, None
        if count and not left:  # it served its batches: the rest of its pass stays unserved
            self._session.stop_here(self._pipeline.source)


class Repeat:
    """The batches of ``epochs`` passes in a row (``None``: without end); see
    ``Pipeline.repeat``."""

    def __init__(self, pipeline: Any, epochs: int | None) -> None:
        self._pipeline, self._left = pipeline, check_count(epochs, "repeat", allow_none=True)
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
        left = saved_count(state, "epochs_left", "Repeat", allow_none=True)
        self._pipeline.set_state(state["pipeline"])
        self._left, self._iterator = left, None
