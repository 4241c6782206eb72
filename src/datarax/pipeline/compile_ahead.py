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
(a stage that fails only once fails at the first batch, as it would have); whatever
else fails on the thread is dropped there, and the first batch meets it again. The thread
copies the building thread's JAX settings, is not a daemon (the interpreter waits for
it at exit rather than stopping it inside the compiler) and ends when its programs are
compiled. ``DATARAX_COMPILE_AHEAD=0`` turns it off.

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

from datarax.pipeline.ahead import consumer_settings
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.filtered import FilteredDispatch
from datarax.pipeline.plan import PassContext

log = logging.getLogger("datarax.compile")


def compile_ahead(context: PassContext, at: int | None) -> threading.Thread | None:
    """Start compiling the programs of the first pass of ``context``'s pipeline on a
    thread (``at``: where its ``FilterOperator`` stands, None without one); None where
    nothing is compiled ahead (a host or stream source, ``DATARAX_COMPILE_AHEAD=0``)."""
    if os.environ.get("DATARAX_COMPILE_AHEAD", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    if not context.reading.compiled:
        return None
    enter = consumer_settings()

    def run() -> None:
        try:
            with enter():
                epoch, _ = context.session.next_pass(context.source)
                dispatch = (IndexedDispatch(context, epoch) if at is None
                            else FilteredDispatch(context, epoch, at))
                for step, args in dispatch.programs():
                    step.prepare(*args)
        except Exception as err:  # noqa: BLE001 - the first batch meets it again
            log.debug("datarax: compiling ahead stopped (%s: %s)", type(err).__name__, err)

    thread = threading.Thread(target=run, name="datarax-compile-ahead", daemon=False)
    thread.start()
    return thread
