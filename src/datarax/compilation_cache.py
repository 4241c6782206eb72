"""An explicit switch for JAX's persistent compilation cache (datarax's own steps have
their own store, :mod:`datarax.core.compiled_store`; importing datarax changes no JAX setting).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from datarax.host.cache_home import cache_home


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path:
    """Turn on JAX's persistent compilation cache in ``path`` and return it.

    ``path`` defaults to ``$XDG_CACHE_HOME/datarax/jax``. Sets the process-wide
    ``jax_compilation_cache_dir`` and ``jax_persistent_cache_min_compile_time_secs=0``.
    JAX keeps the first directory it used: call this before the first compile.

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
