"""The former home of the optional-import helper, kept so older imports still work.

Use :mod:`datarax.core.extras` (``require``, ``missing_extra``) and
:class:`datarax.core.errors.MissingExtraError`; this module only re-exports them.
"""

from datarax.core.errors import MissingExtraError
from datarax.core.extras import missing_extra, require

__all__ = ["MissingExtraError", "missing_extra", "require"]
