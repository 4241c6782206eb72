"""JAX's persistent compilation cache, turned on for datarax users by default.

A pipeline's compiled step costs a fraction of a second to build; caching it on disk
makes the second process that runs the same pipeline start at once. On import,
datarax points JAX's persistent cache at ``$XDG_CACHE_HOME/datarax/jax`` (default
``~/.cache/datarax/jax``) and caches executables that took over 0.1 s to compile —
unless you configured a cache yourself (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update("jax_compilation_cache_dir", ...)``) or set
``DATARAX_COMPILATION_CACHE=0``. Use :func:`enable_compilation_cache` to pick the
directory explicitly.

JAX's cache still leaves each process to trace and lower the step before it can look
the executable up; datarax also stores its compiled steps whole, in
:func:`program_cache_dir` (see :mod:`datarax.pipeline.program_cache`).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

_MIN_COMPILE_SECONDS = 0.1


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/datarax/jax`` (or ``~/.cache/datarax/jax``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "datarax" / "jax"


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path:
    """Cache compiled executables in ``path`` (default :func:`default_cache_dir`).

    Takes effect for compilations after JAX's first one if called before any JAX
    computation (datarax calls it on import).

    Example:
        >>> import datarax.compilation_cache as cc
        >>> str(cc.enable_compilation_cache("/tmp/datarax-xla")).endswith("datarax-xla")
        True
    """
    directory = Path(path) if path is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _MIN_COMPILE_SECONDS)
    return directory


def enable_by_default() -> None:
    """Enable the cache unless the user configured one or opted out."""
    if os.environ.get("DATARAX_COMPILATION_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    try:
        enable_compilation_cache()
    except OSError:  # read-only home: run without the cache
        pass


def program_cache_dir() -> Path | None:
    """Where compiled steps are stored (:mod:`datarax.pipeline.program_cache`).

    ``$DATARAX_PROGRAM_CACHE_DIR`` if set, else ``datarax-programs/`` inside JAX's
    compilation cache directory; ``None`` (nothing stored) when that cache is off or
    not a local path, or with ``DATARAX_PROGRAM_CACHE=0``.

    Example:
        >>> import os
        >>> os.environ["DATARAX_PROGRAM_CACHE"] = "0"
        >>> program_cache_dir() is None
        True
        >>> del os.environ["DATARAX_PROGRAM_CACHE"]
    """
    if os.environ.get("DATARAX_PROGRAM_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    if os.environ.get("DATARAX_PROGRAM_CACHE_DIR"):
        return Path(os.environ["DATARAX_PROGRAM_CACHE_DIR"])
    base = jax.config.jax_compilation_cache_dir
    if not base or "://" in base or not jax.config.jax_enable_compilation_cache:
        return None
    return Path(base) / "datarax-programs"
