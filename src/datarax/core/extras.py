"""Optional dependencies: import one, or fail naming the ``pip install`` command.

Defined in :mod:`datarax.extras` (which imports no JAX or Flax) and named here; see there.

Example:
    >>> require("json", extra="hf", user="HFEagerSource").__name__
    'json'
"""

from __future__ import annotations

from datarax.errors import MissingExtraError
from datarax.extras import EXTRAS, missing_extra, require

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra", "require"]
