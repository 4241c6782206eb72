"""Where the user's caches go (XDG Base Directory spec): shard cache and compiled steps."""

from __future__ import annotations

import os


def cache_home() -> str:
    """``$XDG_CACHE_HOME``, else ``~/.cache`` (a relative one is ignored, as XDG says).

    Example:
        >>> os.path.isabs(cache_home())
        True
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    return base if os.path.isabs(base) else os.path.join(os.path.expanduser("~"), ".cache")
