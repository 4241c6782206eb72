"""``DispatchAhead``: one worker thread preparing a pass's batches ahead of its consumer.

Both drivers use it, so the next batches are made while the consumer's thread trains.
Invariant: items come out in the order ``produce`` made them, and an error making item
``k`` is raised by ``get()`` after items ``0..k-1``: batches, errors and the position
are the same as on the consumer's thread:

    >>> records = iter([[1], [2, 3]])
    >>> ahead = DispatchAhead(lambda: next(records, None), depth=2)
    >>> taken = []
    >>> for _ in range(4):
    ...     taken.append(ahead.get())
    ...     ahead.resume()
    >>> taken
    [1, 2, 3, None]
    >>> ahead.stop()
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from datarax.core.compiled_store import LOWERING_SETTINGS
from datarax.core.threads import run_behind_consumer

# JAX settings a thread may set for itself (``with jax.enable_x64(True):``)
_THREAD_SETTINGS = (*(name.removeprefix("jax_") for name in LOWERING_SETTINGS),
                    "log_compiles", "explain_cache_misses", "debug_key_reuse", "disable_jit")
# How often (seconds) a worker waiting for room checks that its consumer can still take.
_POLL = 0.1
#: seconds a worker whose pass ended waits for the next (``follow``): one thread per loop
PARK_SECONDS = 1.0


def _current_settings() -> tuple[list[tuple[Any, Any]], Any]:
    """The calling thread's JAX settings (context manager, value) and its mesh."""
    values = []
    for name in _THREAD_SETTINGS:
        manager = getattr(jax, name, None)
        if callable(manager) and hasattr(jax.config, f"jax_{name}"):
            values.append((manager, getattr(jax.config, f"jax_{name}")))
    return values, jax.sharding.get_mesh()


def consumer_settings() -> Callable[[], contextlib.ExitStack]:
    """A function that, called in the worker, enters the calling thread's JAX settings
    (JAX keeps them per thread) with their public context managers."""
    values, mesh = _current_settings()

    def enter() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for manager, value in values:
            stack.enter_context(manager(value))
        if not mesh.empty:
            stack.enter_context(jax.set_mesh(mesh))
        return stack

    return enter


class DispatchAhead:
    """Runs ``produce()`` on one worker thread, keeping up to ``depth`` results ready.

    ``produce`` returns a list of the next items, or None when there are no more.
    ``get()`` returns items in order, then None; call ``resume()`` after each. The worker
    ends by itself once the interpreter exits with no thread left to take its items
    (until then the exit waits, so no JAX call is cut off). A finished worker waits up to
    ``PARK_SECONDS`` for :meth:`follow` to hand it the next pass.
    """

    def __init__(self, produce: Callable[[], Any], depth: int,
                 settings: Callable[[], contextlib.ExitStack] | None = None,
                 settings_now: Any = None) -> None:
        if depth < 1:
            raise ValueError(f"DispatchAhead depth must be >= 1, got {depth}.")
        self._produce = produce
        self._depth = depth
        self._settings = settings
        # Lock-free pops from a deque (atomic append/popleft) and wake-ups on a C-level
        # queue keep get() + resume() to a few bytecodes on the cold consumer thread.
        self._items: collections.deque[Any] = collections.deque()
        self._ready = threading.Condition()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._done = False
        self._stopped = False
        self._retired = False  # parked, and no next producer came: the thread ended
        self._settings_now = settings_now
        self._error: BaseException | None = None
        self._owner = threading.current_thread()
        # set once start() returned (or failed): the worker makes nothing before, so a
        # Ctrl-C inside start() never leaves it reading the source beside the caller
        self._start_returned = threading.Event()
        self._thread = threading.Thread(target=self._run, name="datarax-dispatch")
        try:
            self._thread.start()
        except BaseException:  # Ctrl-C while it started: no one could stop it after
            self._end_unjoined()
            raise
        finally:
            self._start_returned.set()

    def _end_unjoined(self) -> None:
        """Tell the worker to end (after the item it is making, if any) and drop what it
        made, without waiting for it."""
        with self._ready:
            self._stopped = True
            self._items.clear()
            self._ready.notify_all()
        self._wake.put(None)

    def _orphaned(self) -> bool:
        """Whether the interpreter is exiting with no thread left to take items."""
        if threading.main_thread().is_alive():
            return False
        owner = self._owner
        return owner is threading.main_thread() or owner.daemon or not owner.is_alive()

    def _run(self) -> None:
        settings = contextlib.ExitStack()
        behind = False
        try:
            while not self._start_returned.wait(_POLL):
                if self._orphaned():
                    return
            if self._settings is not None:
                settings = self._settings()
            while True:
                if not behind and self._items:
                    # from the second item on: XLA's compiler threads, started by the
                    # first, would inherit this thread's priority
                    behind = run_behind_consumer() or True
                while True:  # drop the wake-ups of takes already seen (the check below)
                    try:
                        self._wake.get_nowait()
                    except queue.Empty:
                        break
                while len(self._items) >= self._depth and not self._stopped:
                    try:
                        self._wake.get(timeout=_POLL)  # a take (resume) or stop() posts one
                    except queue.Empty:
                        if self._orphaned():
                            break
                if self._stopped:
                    return
                if self._orphaned():
                    raise RuntimeError("the pipeline's read-ahead worker ended: the "
                                       "interpreter is exiting")
                item = self._produce()
                with self._ready:
                    if item is None:
                        self._done = True
                    else:
                        self._items.extend(item)
                    self._ready.notify_all()
                if self._done and not self._park():
                    return
                item = None  # not held while the next is made: a dropped batch frees now
        except BaseException as err:  # noqa: BLE001 - handed to the consumer
            with self._ready:
                self._error = err
                self._ready.notify_all()
        finally:
            self._produce = None  # type: ignore[assignment] - drop references early
            settings.close()

    def _park(self) -> bool:
        """Wait for :meth:`follow`'s next producer; False (the thread ends) when none came."""
        deadline = time.monotonic() + PARK_SECONDS
        with self._ready:
            if self._done:
                self._produce = None  # type: ignore[assignment]
            while self._done and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0 or self._orphaned():
                    self._retired = True
                    return False
                self._ready.wait(min(_POLL, left))
            return not self._stopped

    @property
    def finished(self) -> bool:
        """Whether the producer finished cleanly and every item was taken."""
        return self._done and not self._items and self._error is None and not self._stopped

    def follow(self, produce: Callable[[], Any], depth: int, settings_now: Any) -> bool:
        """Hand a finished worker the next producer (same JAX settings ``settings_now``);
        False where it cannot take it: start a new worker."""
        with self._ready:
            if (self._retired or self._stopped or self._error is not None or not self._done
                    or self._items or settings_now != self._settings_now):
                return False
            self._produce = produce
            self._depth = depth
            self._done = False
            self._ready.notify_all()
        return True

    def get(self) -> Any:
        """The next item; None once the producer had no more; re-raises its error."""
        try:
            # no wake-up here: the worker would contend for the GIL with next()
            return self._items.popleft()
        except IndexError:
            pass
        with self._ready:
            while not self._items and not self._done and self._error is None:
                self._ready.wait()
            if self._items:
                return self._items.popleft()
            if self._error is not None:
                raise self._error
            return None

    def resume(self) -> None:
        """Let the worker make items again (call after taking one with ``get()``)."""
        # only a take that leaves room wakes it (each wake-up is a thread switch)
        if len(self._items) < self._depth:
            self._wake.put(None)

    def stop(self) -> None:
        """End the worker (after the item it is making, if any) and wait for it."""
        self._end_unjoined()
        if self._thread is not threading.current_thread():
            self._thread.join()


def run_ahead(produce: Callable[[], list[Any] | None], depth: int,
              parked: DispatchAhead | None = None) -> DispatchAhead | None:
    """A worker running ``produce`` ``depth`` items ahead (``parked``'s where it can), or
    None (``depth`` 0). On CPU each item is finished before the next is made: XLA:CPU
    runs a queue of cheap computations slower than one at a time.
    """
    if depth < 1:
        if parked is not None:
            parked.stop()
        return None
    now = _current_settings()
    if jax.default_backend() != "cpu":
        return _follow_or_start(produce, depth, now, parked)

    def computed() -> list[Any] | None:
        items = produce()
        if items is not None:
            # a list inside an item is host data (text): one leaf, not one per string
            leaves = (leaf for item in items
                      for leaf in jax.tree.leaves(item, is_leaf=lambda v: isinstance(v, list)))
            jax.block_until_ready([a for a in leaves if isinstance(a, jax.Array)])
        return items

    return _follow_or_start(computed, depth, now, parked)


def _follow_or_start(produce: Callable[[], Any], depth: int, now: Any,
                     parked: DispatchAhead | None) -> DispatchAhead:
    if parked is not None:
        if parked.follow(produce, depth, now):
            return parked
        parked.stop()
    return DispatchAhead(produce, depth, consumer_settings(), now)
