"""Compiling a pipeline's first pass while the user is still setting up.

When a ``Pipeline`` over an indexed source is built, :func:`compile_ahead` starts one
thread that prepares the pass the first ``iter()`` will serve exactly as that pass
will (:class:`~datarax.pipeline.dispatch.IndexedDispatch`, or
:class:`~datarax.pipeline.filtered.FilteredDispatch` with a ``FilterOperator``) and
compiles — or loads from :mod:`datarax.core.compiled_store` — every program it lists:
the full batch or group, and the short last batch where batch-level stages need it at
its own size (which would otherwise compile in the middle of the epoch); for a filtered
pass, its step and, where batch-level stages follow the filter, those stages at the full
batch (a filtered pass's short last batch has a size known only when it is read). Work the user
does between building the pipeline and asking for the first batch (building a model)
then hides the compile; the first batch waits for what is still compiling.

**Invariant.** Nothing here decides a batch: the thread only fills the compiled
programs' cache, keyed by what each program is built from and called with. A batch,
an error and its message are those of a pipeline that compiled nothing ahead: a
program that fails to compile on the thread raises that error at its first call, once
(a stage that fails only once fails at the first batch, as it would have). Whatever
else the thread meets (preparing the pass rather than compiling a program) is not
dropped: it is reported as a warning, with its traceback, when the first pass starts
(:meth:`CompileAhead.pass_started`), or when it happens if the pass started before; the
pass then compiles what it needs itself. A ``DataraxError`` (a wrong ``element_spec()``, a
declared 64-bit field) is not: the pass raises it itself, said once.

**Exit.** The thread is not a daemon, so no compile of it is cut off inside the
compiler by the interpreter's exit; but once the main thread has ended it starts no
further program: a process that exits right after building a pipeline waits at most for
the one program being compiled, never for the rest of the pass. It copies the building
thread's JAX settings and ends when its programs are compiled.
``DATARAX_COMPILE_AHEAD=0`` turns it off.

Example:
    >>> import numpy as np
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    >>> pipeline = Pipeline(source=source, batch_size=2)  # compiling starts here
    >>> [b["x"].tolist() for b in pipeline]  # the first batch waits for it
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import logging
import os
import threading
import traceback

from datarax.core.errors import DataraxError
from datarax.pipeline.ahead import consumer_settings
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.filtered import FilteredDispatch
from datarax.pipeline.plan import PassContext

log = logging.getLogger("datarax.compile")


class CompileAhead:
    """The thread compiling a pipeline's first pass, and what it met besides compiling.

    :meth:`pass_started` (called when the pipeline's first iterator starts) reports a
    failure the thread already met; one it meets later is reported when it happens.
    Each is reported once, as a warning of the ``datarax.compile`` logger.
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failure: str | None = None  # the formatted error, not yet reported
        self._started = False

    def pass_started(self) -> None:
        """The first pass is starting: report what the thread met, from now on."""
        with self._lock:
            self._started = True
            self._report()

    def failed(self, err: Exception) -> None:
        """The thread met ``err`` while preparing the pass (not a program's compile). A
        ``DataraxError`` is a check of the source or stages that the pass makes and raises
        itself as it starts: not reported a second time."""
        if isinstance(err, DataraxError):
            log.debug("datarax: compiling ahead stopped (%s: %s)", type(err).__name__, err)
            return
        # the text only: the traceback's frames would keep the pass's arrays alive
        text = "".join(traceback.format_exception(err)).rstrip()
        with self._lock:
            self._failure = text
            if self._started:
                self._report()

    def _report(self) -> None:
        if self._failure is not None:
            log.warning("datarax: compiling the first pass ahead failed; the pass compiles "
                        "its programs itself:\n%s", self._failure)
            self._failure = None


def _exiting() -> bool:
    """Whether the interpreter is exiting (the main thread has ended)."""
    return not threading.main_thread().is_alive()


def compile_ahead(context: PassContext, at: int | None) -> CompileAhead | None:
    """Start compiling the programs of the first pass of ``context``'s pipeline on a
    thread (``at``: where its ``FilterOperator`` stands, None without one), and hand its
    :class:`CompileAhead` to the pipeline's session (``session.ahead``); None where
    nothing is compiled ahead (a host or stream source, ``DATARAX_COMPILE_AHEAD=0``)."""
    if os.environ.get("DATARAX_COMPILE_AHEAD", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    if not context.reading.compiled:
        return None
    enter = consumer_settings()
    ahead = CompileAhead()

    def run() -> None:
        try:
            with enter():
                try:
                    epoch, _ = context.session.next_pass(context.source)
                    dispatch = (IndexedDispatch(context, epoch) if at is None
                                else FilteredDispatch(context, epoch, at))
                    programs = dispatch.programs()
                except Exception as err:  # noqa: BLE001 - reported when the first pass starts
                    ahead.failed(err)
                    return
                for step, args in programs:
                    if _exiting():  # the rest would only keep the exit waiting
                        return
                    try:
                        step.prepare(*args)
                    except Exception as err:  # noqa: BLE001 - raised by the step's first call
                        log.debug("datarax: compiling ahead stopped (%s: %s)",
                                  type(err).__name__, err)
                        return
        except Exception as err:  # noqa: BLE001 - taking on the settings failed: reported too
            ahead.failed(err)

    ahead.thread = threading.Thread(target=run, name="datarax-compile-ahead", daemon=False)
    context.session.ahead = ahead
    ahead.thread.start()
    return ahead
