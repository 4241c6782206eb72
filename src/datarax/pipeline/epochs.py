"""Transformations of a pipeline's passes: ``take``, ``repeat`` (and ``Rebatch``).

Each is a node serving its parent's own passes, so shuffles and per-record keys still
change every epoch. A node's state nests its parent's, as Grain's dataset iterators do:
``{**its own counts, "parent": parent.get_state()}``.

Example:
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    >>> take = Pipeline(source=src, batch_size=2).take(2)
    >>> _ = next(take); state = take.get_state()
    >>> state["take_left"], state["parent"]["position"]
    (1, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.core.errors import StateError
from datarax.core.position import saved_count
from datarax.host.counts import check_count, count_words
from datarax.typing import Batch


def nested_state(state: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """``state`` of the transformation ``where``, refused unless it has its ``keys`` and
    ``"parent"`` (naming an earlier release's state).

    >>> nested_state({"epochs_left": 1, "parent": {}}, "Repeat", ("epochs_left",))
    {'epochs_left': 1, 'parent': {}}
    """
    if not isinstance(state, dict) or not {*keys, "parent"} <= set(state):
        names = ", ".join(repr(k) for k in keys) + " and 'parent'"
        earlier = isinstance(state, dict) and isinstance(state.get("pipeline"), dict)
        raise StateError(
            f"{where}.set_state needs the dict {where}.get_state() returned, with keys "
            f"{names}; got {state!r:.200}."
            + (f" It is an earlier datarax release's (its pipeline's state, of version "
               f"{state['pipeline'].get('version')!r}, under 'pipeline'): restore it with "
               "that release, or start the epoch again with a fresh pipeline."
               if earlier else ""), field=keys[0],
        )
    return state


def length_of(thing: Any, what: str) -> int:
    """``len(thing)``; where that is unknown, a ``TypeError`` saying so of ``what`` too."""
    try:
        return len(thing)
    except TypeError as error:
        raise TypeError(f"len({what}) is unknown: {error}") from None


def next_pass_batches(pipeline: Any, context: Any, what: str) -> int:
    """Batches the next ``iter(pipeline)`` serves; ``TypeError`` (naming ``what``) when
    the length is unknown."""
    length_of(pipeline, what)
    epoch, at = context.session.next_pass(context.source)
    return context.batches_left(epoch, at or 0)


class Transformation:
    """A node over ``parent`` whose state nests the parent's; subclasses give their own
    counts (:meth:`own_state`) and take them back (:meth:`restore_own`)."""

    KEYS: tuple[str, ...] = ()

    def __init__(self, parent: Any) -> None:
        self.parent = parent

    def own_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def check_own(self, state: dict[str, Any]) -> None:
        """Refuse counts of ``state`` this node cannot continue (before any is restored)."""

    def restore_own(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def over(cls, parent: Any, own: dict[str, Any]) -> Transformation:
        """A new node of this kind over ``parent``, for the counts ``own``."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        """``copy.deepcopy`` / ``pickle``: the same node over a copy of its parent."""
        return (_remade, (type(self), self.parent, self.own_state()))

    def described_parent(self) -> str:
        """Its parent in a few words (a Pipeline's own repr is its whole module tree)."""
        parent = self.parent
        if isinstance(parent, Transformation):
            return repr(parent)
        return (f"a Pipeline over {type(parent.source).__name__} with batch_size "
                f"{parent.batch_size}")

    def get_state(self) -> dict[str, Any]:
        """Its own counts and its parent's state under ``"parent"``."""
        return {**self.own_state(), "parent": self.parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state()`` of an identically built node)."""
        state = nested_state(state, type(self).__name__, self.KEYS)
        self.check_own(state)
        self.parent.set_state(state["parent"])
        self.restore_own(state)


def _remade(kind: type[Transformation], parent: Any, own: dict[str, Any]) -> Any:
    """A ``kind`` node over ``parent`` at the counts ``own``."""
    node = kind.over(parent, own)
    node.restore_own(own)
    return node


class Take(Transformation):
    """At most ``batches`` batches of the pipeline's next pass (see ``Pipeline.take``).

    A take that served its batches leaves the rest of its pass unserved, as a ``break``
    does, after a restore too.
    """

    KEYS = ("take_left", "take")

    def __init__(self, pipeline: Any, batches: int, context: Any) -> None:
        super().__init__(pipeline)
        self._left = check_count(batches, "Pipeline.take", 0)
        self._count, self._context = self._left, context  # the pipeline's PassContext
        self._iterator: Any = None

    @classmethod
    def over(cls, parent: Any, own: dict[str, Any]) -> Take:
        return parent.take(own["take"])

    def __repr__(self) -> str:
        left = count_words(self._left, "batch", "batches")
        return f"take({self._count}) of {self.described_parent()}: {left} left"

    def __iter__(self) -> Take:
        return self

    def __next__(self) -> Batch:
        if self._left <= 0:
            raise StopIteration
        if self._iterator is None:
            self._iterator = iter(self.parent)
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._left = 0
            raise
        self._left -= 1
        return batch

    def __len__(self) -> int:
        """Batches it still serves; ``TypeError`` when the pass's length is unknown."""
        if self._left <= 0:
            return 0
        what = f"pipeline.take({self._count})"
        if self._iterator is None:
            return min(self._left, next_pass_batches(self.parent, self._context, what))
        return min(self._left, length_of(self._iterator, what))

    def own_state(self) -> dict[str, Any]:
        """The batches asked for and the batches still to take."""
        return {"take": self._count, "take_left": self._left}

    def check_own(self, state: dict[str, Any]) -> None:
        """Refuse a state of another count (or one tampered with)."""
        left = saved_count(state, "take_left", "Take")
        count = saved_count(state, "take", "Take")
        if count != self._count:
            raise StateError(
                f"Take.set_state: the state was saved by pipeline.take({count}) "
                f"({count_words(left, 'batch', 'batches')} left), but this is "
                f"pipeline.take({self._count}); the "
                f"batches left count from the saved take. Restore it into "
                f"pipeline.take({count}).",
                field="take",
            )
        if left > count:
            raise StateError(
                f"Take.set_state: 'take_left' is {left}, more than the "
                f"{count_words(count, 'batch', 'batches')} "
                "of the take; the state was tampered with. Pass the dict Take.get_state() "
                "returned.",
                field="take_left",
            )

    def restore_own(self, state: dict[str, Any]) -> None:
        self._left, self._iterator = int(state["take_left"]), None
        if self._count and not self._left:  # the rest of its pass stays unserved
            self._context.session.stop_here(self.parent.source)


class EmptyPasses:
    """Empty passes in a row of a loop over passes (``what``): the second raises
    ``StopIteration`` rather than loop without end.

    >>> empties = EmptyPasses(object(), "repeat()")
    >>> empties.ended(True); empties.ended(False); empties.ended(True); empties.ended(True)
    Traceback (most recent call last):
    ...
    StopIteration: object served two empty passes in a row (every record filtered out?): repeat() stops rather than loop without end.
    """

    def __init__(self, source: Any, what: str) -> None:
        self.source, self.what, self.count = source, what, 0

    def ended(self, empty: bool) -> None:
        """A pass ended; ``empty``: a whole pass (not a restored rest) that served nothing."""
        self.count = self.count + 1 if empty else 0
        if self.count >= 2:
            raise StopIteration(
                f"{type(self.source).__name__} served two empty passes in a row (every record "
                f"filtered out?): {self.what} stops rather than loop without end.")


class Repeat(Transformation):
    """The batches of ``epochs`` passes in a row (``None``: without end); see
    ``Pipeline.repeat`` and ``Rebatch.repeat``."""

    KEYS = ("epochs_left",)

    def __init__(self, parent: Any, epochs: int | None, context: Any = None) -> None:
        super().__init__(parent)
        where = "Pipeline.repeat" if context is not None else "Rebatch.repeat"
        self._left = None if epochs is None else check_count(
            epochs, where, 0, " (or None: without end)")
        self._epochs = self._left
        self._context = context  # the pipeline's PassContext (None over a Rebatch)
        self._iterator: Any = None
        self._served = False  # the current pass handed out a batch
        self._whole = False  # the current pass began at its epoch's start

    @classmethod
    def over(cls, parent: Any, own: dict[str, Any]) -> Repeat:
        return parent.repeat(own.get("repeat", own["epochs_left"]))

    def __repr__(self) -> str:
        left = ("without end" if self._left is None
                else f"{count_words(self._left, 'pass', 'passes')} left")
        return f"repeat({self._epochs}) of {self.described_parent()}: {left}"

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy has the same setting and passes left."""
        return (_remade, (type(self), self.parent, {**self.own_state(), "repeat": self._epochs}))

    def __iter__(self) -> Repeat:
        return self

    def __next__(self) -> Batch:
        empties = EmptyPasses(self.parent.source, "repeat()")
        while self._left is None or self._left > 0:
            if self._iterator is None:
                self._iterator, self._served = iter(self.parent), False
                self._whole = self.parent.position == 0
            try:
                batch = next(self._iterator)
                self._served = True
                return batch
            except StopIteration:
                self._iterator = None
                if self._left is not None:
                    self._left -= 1
            empties.ended(self._whole and not self._served)
        raise StopIteration

    def __len__(self) -> int:
        """Batches it still serves; ``TypeError`` when unknown (``repeat(None)`` too)."""
        what = f"repeat({self._left})"
        if self._left is None:
            raise TypeError("len(repeat(None)) is unknown: it repeats without end.")
        if self._left == 0:
            return 0
        per_epoch = length_of(self.parent, what)
        if self._iterator is not None:
            current = length_of(self._iterator, what)
        else:
            current = self._next_pass_batches(per_epoch, what)
        return current + (self._left - 1) * per_epoch

    def _next_pass_batches(self, per_epoch: int, what: str) -> int:
        """Batches of the pass the next ``next()`` starts."""
        if self._context is not None:
            return next_pass_batches(self.parent, self._context, what)
        if self.parent.position == 0 and self.parent.get_state()["part"] == 0:
            return per_epoch  # a Rebatch at its epoch's start
        raise TypeError(
            f"len({what}) over a Rebatch restored inside a pass is known once that pass "
            "started: call next() first."
        )

    def own_state(self) -> dict[str, Any]:
        """The passes still to serve (the current one included)."""
        return {"epochs_left": self._left}

    def check_own(self, state: dict[str, Any]) -> None:
        """Refuse passes left that its setting cannot have saved."""
        left = saved_count(state, "epochs_left", "Repeat", allow_none=True)
        if left == self._epochs or (left is not None and self._epochs is not None
                                    and left <= self._epochs):
            return
        call = f"{'pipeline' if self._context is not None else 'rebatch'}.repeat"
        if left is None:
            saved, fit = f"{call}(None) (without end)", f"{call}(None)"
        else:
            saved, fit = f"{call}(n) with n >= {left}", f"{call}({left}) or more"
        raise StateError(
            f"Repeat.set_state: 'epochs_left' is {left}, which does not fit this "
            f"{call}({self._epochs}){' (without end)' if self._epochs is None else ''}; "
            f"the state was saved by "
            f"{saved}. Restore it into the repeat that saved it ({fit}).",
            field="epochs_left",
        )

    def restore_own(self, state: dict[str, Any]) -> None:
        self._left = saved_count(state, "epochs_left", "Repeat", allow_none=True)
        self._iterator = None
