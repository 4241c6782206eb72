"""Where the user's caches go, as the XDG Base Directory specification says.

datarax's shard cache (:func:`datarax.storage.default_cache_dir`) and its store of
compiled steps (:func:`datarax.core.compiled_store.cache_dir`) both lie under
:func:`cache_home`, so one rule says where.
"""

from __future__ import annotations

import os


def cache_home() -> str:
    """``$XDG_CACHE_HOME``, else ``~/.cache``. A relative ``XDG_CACHE_HOME`` is ignored,
    as the XDG specification says: it would name another folder in every working
    directory.

    Example:
        >>> os.path.isabs(cache_home())
        True
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    return base if os.path.isabs(base) else os.path.join(os.path.expanduser("~"), ".cache")
