"""Import an optional dependency, or fail with the ``pip install`` line that adds it."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional package a source needs is not installed; the message names the extra."""


def require(module: str, *, extra: str, user: str) -> ModuleType:
    """``import module`` for ``user``, or raise naming ``pip install "datarax[extra]"``.

    Example:
        >>> require("json", extra="hf", user="HFEagerSource").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{user} needs the optional package '{module.split('.')[0]}', which is not "
            f'installed. Install it with: pip install "datarax[{extra}]"'
        ) from err
