"""Whole-epoch order tables of shuffled ``MemorySource``s, the next epoch's built ahead.

A shuffled :class:`~datarax.sources.MemorySource` of up to ``SHUFFLE_TABLE_MAX``
records hands its compiled step a table of the epoch's order (the record index at
each position) instead of running the Feistel cipher in the step. Building the table
on the host costs milliseconds (~5–20 ms at 50,000 records), paid at the start of
every pass. :func:`order_ahead` builds the next epoch's table on a short-lived daemon
thread while the current epoch is served (NumPy releases Python's lock for most of
it), so the pass that asks for it with :func:`order_table` finds it done, or waits
only for the rest. The tables are the same either way (bit for bit, read-only); a
table whose ahead build failed is built again by the caller, which meets the error.

Example:
    >>> order_ahead(10, 7)  # starts building
    >>> table = order_table(10, 7)  # the table built ahead (or waited for)
    >>> sorted(table.tolist()) == list(range(10)), table.flags.writeable
    (True, False)
"""

from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import Future

import numpy as np

from datarax.samplers.index_shuffle import index_shuffle_np

#: tables kept (the current epoch's and the next, of a few sources)
KEEP = 4

_LOCK = threading.Lock()
# (process id, length, seed) -> the table, or its build in progress; the process id
# keeps a forked child from waiting for a build its parent's thread was running
_TABLES: collections.OrderedDict[tuple[int, int, int], Future[np.ndarray]] = (
    collections.OrderedDict())


def _build(length: int, seed: int) -> np.ndarray:
    order = index_shuffle_np(np.arange(length), length - 1, seed).astype(np.int32)
    order.setflags(write=False)
    return order


def _entry(length: int, seed: int) -> tuple[Future[np.ndarray], bool]:
    """The table's future, and whether the caller created it (and must build it)."""
    key = (os.getpid(), length, seed)
    with _LOCK:
        found = _TABLES.get(key)
        if found is not None:
            _TABLES.move_to_end(key)
            return found, False
        made: Future[np.ndarray] = Future()
        _TABLES[key] = made
        while len(_TABLES) > KEEP:
            _TABLES.popitem(last=False)
        return made, True


def _fill(future: Future[np.ndarray], length: int, seed: int) -> None:
    try:
        future.set_result(_build(length, seed))
    except BaseException as err:  # noqa: BLE001 - handed to whoever waits for it
        future.set_exception(err)


def order_table(length: int, seed: int) -> np.ndarray:
    """The record index at each position of an epoch of ``length`` records shuffled by
    ``seed`` (int32, read-only): built ahead, else built now."""
    future, mine = _entry(length, seed)
    if mine:
        _fill(future, length, seed)
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - built again here: this caller meets the error
        with _LOCK:
            if _TABLES.get((os.getpid(), length, seed)) is future:
                del _TABLES[(os.getpid(), length, seed)]
        return _build(length, seed)


def order_ahead(length: int, seed: int) -> None:
    """Start building :func:`order_table` ``(length, seed)`` on a daemon thread, unless
    it is built or being built."""
    future, mine = _entry(length, seed)
    if mine:
        threading.Thread(target=_fill, args=(future, length, seed),
                         name="datarax-order-ahead", daemon=True).start()
