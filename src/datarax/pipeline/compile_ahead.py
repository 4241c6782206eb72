"""Compiling a pipeline's first pass while the user is still setting up.

Building a ``Pipeline`` over an indexed source starts one thread that prepares the first
pass as the pass itself will and compiles (or loads) every program it lists, so work done
before the first batch hides the compile.

**Invariant.** Nothing here decides a batch: the thread only fills the compiled
programs' cache, so batches, errors and messages are those of a pipeline that compiled
nothing ahead. Details (failures, exit, ``DATARAX_COMPILE_AHEAD=0``):
docs/reliability.md, "Compiled ahead".

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
import threading
import traceback

from datarax.core.errors import DataraxError
from datarax.host.settings import switched_on
from datarax.pipeline.ahead import consumer_settings
from datarax.pipeline.devices import stage_mesh
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.filtered import FilteredDispatch
from datarax.pipeline.plan import PassContext

log = logging.getLogger("datarax.compile")


class CompileAhead:
    """The thread compiling a pipeline's first pass; a failure preparing the pass is
    logged once, when the first pass starts or later when it happens."""

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
        """The thread met ``err`` preparing the pass; a ``DataraxError`` the pass raises itself."""
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
    """Start compiling the first pass's programs on a thread (``at``: the filter's stage)
    and hand its :class:`CompileAhead` to ``session.ahead``; None where nothing is."""
    if not switched_on("DATARAX_COMPILE_AHEAD"):
        return None
    if not context.reading.compiled:
        return None
    enter = consumer_settings()
    ahead = CompileAhead()

    def run() -> None:
        try:
            with enter(), stage_mesh(context.plan):
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
