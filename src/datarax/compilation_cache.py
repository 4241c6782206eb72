"""An explicit switch for JAX's persistent compilation cache.

Importing datarax changes no JAX setting. datarax's own data steps are kept on disk
anyway, in a store of their own keyed by the lowered program
(:mod:`datarax.core.compiled_store`; ``DATARAX_COMPILE_CACHE=0`` turns it off).
:func:`enable_compilation_cache` turns on JAX's persistent cache for everything else
the process compiles (a model, a train step): call it once, before the first compile.
JAX keys each entry by the lowered program, so an edited function (or a value it reads
while tracing) compiles afresh; it is never served a stale program.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from datarax.host.cache_home import cache_home


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path:
    """Turn on JAX's persistent compilation cache in ``path`` and return it.

    ``path`` defaults to ``$XDG_CACHE_HOME/datarax/jax`` (``~/.cache/datarax/jax``);
    the directory is created now. This sets the process-wide options
    ``jax_compilation_cache_dir`` and ``jax_persistent_cache_min_compile_time_secs``
    (0: every compiled step is stored), as ``jax.config.update`` would.

    JAX keeps the first directory it used for the rest of the process: call this
    before the first pipeline runs.

    Example:
        >>> import tempfile, jax, datarax
        >>> folder = datarax.enable_compilation_cache(tempfile.mkdtemp())
        >>> jax.config.jax_compilation_cache_dir == str(folder)
        True
        >>> jax.config.update("jax_compilation_cache_dir", None)  # off again (this example only)
        >>> jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    """
    if path is None:
        path = Path(cache_home()) / "datarax" / "jax"
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return directory
