"""A package's curated names, each imported from its home module on first use.

One mechanism (PEP 562) for every curated ``__init__``: ``from package import Name``
imports only ``Name``'s module.

Example:
    >>> namespace = {"__name__": "demo", "__all__": ["sqrt"]}
    >>> get, names = lazy_exports(namespace, {"sqrt": "math"})
    >>> get("sqrt")(9.0), names()[-1], "sqrt" in namespace
    (3.0, 'sqrt', True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], homes: Mapping[str, str], modules: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose ``globals()`` is ``namespace``;
    ``homes``: exported name -> module, ``modules``: subpackages."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in homes:
            value = getattr(importlib.import_module(homes[name]), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        # not the helpers its __init__ imports (TYPE_CHECKING, lazy_exports)
        own = {name for name, value in namespace.items() if name.startswith("__") or (
            getattr(value, "__name__", None) == f"{package}.{name}")}
        return sorted(own | set(namespace.get("__all__", ())) | set(modules))

    return __getattr__, __dir__
