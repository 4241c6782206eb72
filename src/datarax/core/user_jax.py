"""What datarax observes of the user's JAX, without changing it.

Two questions a compiled step asks: did JAX's own persistent compilation cache serve this
compile (heard through the public ``jax.monitoring`` events, in the compiling thread), and
is the user debugging (``jax.disable_jit()``, ``jax_debug_nans`` / ``jax_debug_infs``), in
which case a step runs as its plain ``jax.jit``. No JAX option is read beyond these or set.

>>> from datarax.core.user_jax import compiled_here, jax_debugging
>>> compiled_here(lambda: "program")
('program', True)
>>> jax_debugging()
False
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import jax

T = TypeVar("T")

#: what ``jax.monitoring`` records, in the compiling thread, when JAX's persistent
#: compilation cache serves a compile
JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_LISTENING: list[bool] = []  # [True] once registered for good (JAX < 0.8.1 only)
_LISTENING_LOCK = threading.Lock()
_SERVED = threading.local()  # .hit: JAX's cache served this thread's compile under way


def compiled_here(compile: Callable[[], T]) -> tuple[T, bool]:
    """``compile()``'s result, and whether XLA compiled it in this process (False: JAX's
    persistent compilation cache served it). The listener is there for this compile only
    (a user's ``jax.monitoring.clear_event_listeners()`` between compiles takes nothing
    away); if it went during the compile, nobody can say: False. JAX before 0.8.1 has no
    public way to remove a listener: there, one stays for the process."""
    _SERVED.hit = False
    unregister = getattr(jax.monitoring, "unregister_event_listener", None)
    if unregister is None:
        with _LISTENING_LOCK:
            if not _LISTENING:
                jax.monitoring.register_event_listener(_note_jax_cache_hit)
                _LISTENING.append(True)
        return compile(), not _SERVED.hit
    jax.monitoring.register_event_listener(_note_jax_cache_hit)
    try:
        compiled = compile()
    finally:
        try:
            unregister(_note_jax_cache_hit)
            heard = True
        except (AssertionError, ValueError):  # cleared meanwhile: a hit may have gone unheard
            heard = False
    return compiled, heard and not _SERVED.hit


def _note_jax_cache_hit(event: str, **kwargs: Any) -> None:
    if event == JAX_CACHE_HIT:
        _SERVED.hit = True


def jax_debugging() -> bool:
    """True under ``jax.disable_jit()``, ``jax_debug_nans`` or ``jax_debug_infs``: a step
    then runs as its ``jax.jit`` (op by op; a NaN's op named), not a stored program (JAX
    refuses to call one under disable_jit, and its NaN check names no op)."""
    config = jax.config
    return bool(config.jax_disable_jit or config.jax_debug_nans or config.jax_debug_infs)
