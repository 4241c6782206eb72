"""How the tests read a source directly and check that its state resumes it
(``tests/conftest.py`` puts this folder on ``sys.path``).

``read_all`` / ``read_n`` read batches with ``get_batch_with_indices``;
``check_resumes_at_every_batch`` saves a source's state after each batch, restores it
through JSON into a fresh source and compares the rest; ``check_pipeline_resumes`` does
the same for a Pipeline's ``get_state`` / ``set_state`` while iterating it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datarax.testing import json_round_trip


def xs(batch: Any, stable: Any = None, field: str = "x") -> list[int]:
    """The batch's ``field`` values as a list of ints."""
    return np.asarray(batch[field]).tolist()


View = Callable[[Any, Any], Any]


def read_all(source: Any, size: int, view: View = xs) -> list[Any]:
    """``view(batch, stable_indices)`` of each batch of ``size`` the source hands out
    (``get_batch_with_indices``) until its pass ends."""
    out = []
    while True:
        batch, stable = source.get_batch_with_indices(size)
        if batch is None:
            return out
        out.append(view(batch, stable))


def read_n(source: Any, size: int, n: int, view: View = xs) -> list[Any]:
    """``view(batch, stable_indices)`` of the next ``n`` batches of ``size``."""
    return [view(*source.get_batch_with_indices(size)) for _ in range(n)]


def flat(batches: list[list[Any]]) -> list[Any]:
    """The values of ``batches`` in order, in one list."""
    return [x for batch in batches for x in batch]


def check_resumes_at_every_batch(build: Callable[[], Any], size: int, *, view: View = xs,
                                 check_state: Callable[[Any, list[Any]], None] | None = None,
                                 ) -> list[Any]:
    """For each number of batches of ``size`` read from ``build()`` (0 to all of a
    pass): its ``get_state()`` through JSON restored into a fresh ``build()`` serves
    exactly the batches a whole read serves after that many. ``check_state(state,
    batches_before)`` may assert on each state; sources with ``close`` are closed.
    Returns the whole read."""
    whole = build()
    expected = read_all(whole, size, view)
    _close(whole)
    for cut in range(len(expected) + 1):
        source = build()
        assert read_n(source, size, cut, view) == expected[:cut]
        state = json_round_trip(source.get_state())
        if check_state is not None:
            check_state(state, expected[:cut])
        fresh = build()
        fresh.set_state(state)
        assert read_all(fresh, size, view) == expected[cut:], f"resumed after batch {cut}"
        _close(source)
        _close(fresh)
    return expected


def _close(source: Any) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def check_pipeline_resumes(build: Callable[[], Any], view: Callable[[Any], list[Any]] = xs, *,
                           after: Callable[[Any, int], None] | None = None,
                           ) -> tuple[Any, list[list[Any]], list[Any]]:
    """Iterates one epoch of ``build()``, taking ``get_state()`` (through JSON) after each
    batch; each state restored into a fresh ``build()`` serves exactly the records after
    it (``after(resumed, k)`` may then assert on the pipeline resumed after batch ``k``).
    Returns the pipeline read through, ``view`` of each batch and the states."""
    pipeline = build()
    batches, states = [], []
    for batch in pipeline:
        batches.append(view(batch))
        states.append(json_round_trip(pipeline.get_state()))
    for k, state in enumerate(states):
        resumed = build()
        resumed.set_state(state)
        rest = flat([view(batch) for batch in resumed])
        assert flat(batches[:k + 1]) + rest == flat(batches), f"resumed after batch {k}"
        if after is not None:
            after(resumed, k)
    return pipeline, batches, states


def two_epochs(pipeline: Any, states: list[Any] | None = None) -> list[Any]:
    """The batches (as lists of ``x``) of a Pipeline's passes up to the end of epoch 1,
    then the error raised if one was (``"Type: message"``); ``states`` gets the state
    (through JSON) after each batch."""
    served: list[Any] = []
    try:
        for _ in range(2 - pipeline.get_state()["epoch"]):
            for batch in pipeline:
                served.append(xs(batch))
                if states is not None:
                    states.append(json_round_trip(pipeline.get_state()))
    except Exception as error:  # noqa: BLE001 - the caller compares it
        served.append(f"{type(error).__name__}: {error}")
    return served


def with_numpy_ints(state: Any) -> Any:
    """``state`` with every int a NumPy int64, as a checkpoint kept in NumPy gives it back."""
    if isinstance(state, dict):
        return {k: with_numpy_ints(v) for k, v in state.items()}
    if isinstance(state, list):
        return [with_numpy_ints(v) for v in state]
    return np.int64(state) if isinstance(state, int) and not isinstance(state, bool) else state
