"""Whole-epoch order tables of shuffled ``MemorySource``s, the next epoch's made ahead.

A shuffled :class:`~datarax.sources.MemorySource` of up to ``SHUFFLE_TABLE_MAX``
records hands its compiled step a table of the epoch's order instead of running the
Feistel cipher in the step. Building and placing it costs milliseconds at every pass's
start, so the next epoch's is made ahead (:func:`placed_order_ahead`), on one
long-lived worker thread, placed as the caller's ``device_put`` would (its device and
x64 setting, captured when asked). It is what the caller would make, bit for bit; work
that failed ahead is done again by the caller, which meets the error.

Example:
    >>> table = order_table(10, 7)
    >>> sorted(table.tolist()) == list(range(10)), table.flags.writeable
    (True, False)
    >>> placed_order_ahead(10, 7, np.int32(20))
    >>> placed = placed_order(10, 7, np.int32(20))  # on the default device already
    >>> int(placed["base"]), bool((np.asarray(placed["order"]) == table).all())
    (20, True)
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datarax.samplers.index_shuffle import index_shuffle_jnp, index_shuffle_np

#: tables (and placed orders) kept: the current epoch's and the next, of a few sources
KEEP = 4
#: seconds the worker waits before making an order of at least ``DELAY_FROM`` records
#: asked ahead: the pass that asked is starting, and the worker's Python would take the
#: interpreter's lock from it (docs/benchmarks.md)
AHEAD_DELAY_S = 0.003
DELAY_FROM = 1 << 15
#: backends whose orders made ahead are built by NumPy on the host (elsewhere the device
#: computes them: :func:`_place`); a caller that finds none made builds it on the host
HOST_BUILT_ON = frozenset({"cpu"})
#: the first epoch whose order made ahead the device computes (the orders of epochs 0
#: and 1 are asked for while the first batch compiles)
DEVICE_FROM_EPOCH = 2

_LOCK = threading.Lock()
# (process id, length, seed) -> the table, or its build in progress; the process id
# keeps a forked child from waiting for a build its parent's thread was running
_TABLES: collections.OrderedDict[tuple[Any, ...], Future[Any]] = collections.OrderedDict()
# (process id, length, seed, base, base dtype, x64, default device) -> the placed order
_PLACED: collections.OrderedDict[tuple[Any, ...], Future[Any]] = collections.OrderedDict()
# (process id, the worker): one per process (a forked child starts its own)
_WORKER: list[Any] = [None, None]


def _build(length: int, seed: int) -> np.ndarray:
    order = index_shuffle_np(np.arange(length), length - 1, seed).astype(np.int32)
    order.setflags(write=False)
    return order


def _entry(cache: collections.OrderedDict[tuple[Any, ...], Future[Any]],
           key: tuple[Any, ...]) -> tuple[Future[Any], bool]:
    """``key``'s future in ``cache``, and whether the caller created it (and must fill it)."""
    with _LOCK:
        found = cache.get(key)
        if found is not None:
            cache.move_to_end(key)
            return found, False
        made: Future[Any] = Future()
        cache[key] = made
        while len(cache) > KEEP:
            cache.popitem(last=False)
        return made, True


def _made(cache: collections.OrderedDict[tuple[Any, ...], Future[Any]], key: tuple[Any, ...],
          make: Any, *args: Any) -> Any:
    """``make(*args)`` kept under ``key`` in ``cache``: made by an earlier caller (or waited
    for while another thread makes it), else made now; one whose making failed there is
    made again here, so that this caller meets the error."""
    future, mine = _entry(cache, key)
    if mine:
        _fill(future, make, *args)
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - made again here: this caller meets the error
        with _LOCK:
            if cache.get(key) is future:
                del cache[key]
        return make(*args)


def _fill(future: Future[Any], make: Any, *args: Any) -> None:
    try:
        future.set_result(make(*args))
    except BaseException as err:  # noqa: BLE001 - handed to whoever waits for it
        future.set_exception(err)


def _submit(make: Any, *args: Any) -> None:
    """Run ``make(*args)`` on the process's worker thread (started at the first call).
    Its threads are joined when the interpreter exits, so work asked for last finishes
    before JAX is torn down."""
    with _LOCK:
        if _WORKER[0] != os.getpid():
            _WORKER[:] = [os.getpid(), ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="datarax-order-ahead")]
        worker = _WORKER[1]
    worker.submit(make, *args)


def order_table(length: int, seed: int) -> np.ndarray:
    """The record index at each position of an epoch of ``length`` records shuffled by
    ``seed`` (int32, read-only): built by an earlier caller (or waited for while another
    thread builds it), else built now."""
    return _made(_TABLES, (os.getpid(), length, seed), _build, length, seed)


def _placed_key(length: int, seed: int, base: np.integer) -> tuple[Any, ...]:
    """What decides the placed order: the table, the base, and the caller's placement
    settings (``jax_default_device`` and x64 are per thread under their context managers)."""
    return (os.getpid(), length, seed, int(base), np.dtype(type(base)).str,
            bool(jax.config.jax_enable_x64), jax.config.jax_default_device)


def _put(length: int, seed: int, base: np.integer) -> Any:
    return jax.device_put({"base": base, "order": order_table(length, seed)})


@functools.lru_cache(maxsize=8)
def _order_program(length: int) -> Any:
    """The order of ``length`` records computed by the accelerator (the same cipher as
    :func:`_build`, bit for bit), a function of the seed."""
    return jax.jit(lambda seed: index_shuffle_jnp(jnp.arange(length, dtype=jnp.uint32),
                                                  length - 1, seed))


def _platform(device: Any) -> str:
    if device is None:
        return jax.default_backend()
    return device if isinstance(device, str) else getattr(device, "platform", "")


def _place(length: int, seed: int, base: np.integer, x64: bool, device: Any) -> Any:
    """:func:`_put` as a caller with settings ``x64`` and ``device``
    (``jax_default_device``) would put it, after ``AHEAD_DELAY_S`` for a long order.
    Off the CPU the device computes the order (NumPy here would take the interpreter's
    lock from the loop's thread), from epoch ``DEVICE_FROM_EPOCH`` on, so its program
    compiles while a later epoch runs, never beside a pipeline's first batch."""
    if length >= DELAY_FROM and AHEAD_DELAY_S > 0:
        time.sleep(AHEAD_DELAY_S)
    with jax.enable_x64(x64), jax.default_device(device):
        if (_platform(device) not in HOST_BUILT_ON and length <= 2**31
                and int(base) >= DEVICE_FROM_EPOCH * length):
            return {"base": jax.device_put(base), "order": _order_program(length)(np.uint32(seed))}
        return _put(length, seed, base)


def placed_order(length: int, seed: int, base: np.integer) -> Any:
    """``{"base": base, "order": order_table(length, seed)}`` on the device where this
    thread's ``jax.device_put`` puts it: the one made ahead (waited for if still being
    made) or by an earlier caller, else placed now (and kept)."""
    return _made(_PLACED, _placed_key(length, seed, base), _put, length, seed, base)


def placed_order_ahead(length: int, seed: int, base: np.integer) -> None:
    """Start making :func:`placed_order` ``(length, seed, base)``, as this thread would
    place it, on the worker thread (unless made or being made)."""
    key = _placed_key(length, seed, base)
    future, mine = _entry(_PLACED, key)
    if mine:
        _submit(_fill, future, _place, length, seed, base, key[5], key[6])
