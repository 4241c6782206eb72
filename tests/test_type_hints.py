"""The public API's annotations resolve at run time, as type checkers and IDEs read them.

``datarax`` ships ``py.typed``: a name an annotation uses must exist where the
annotation is evaluated (``typing.get_type_hints``), else checkers and tools that
resolve hints (IDEs, pydantic, typeguard) see an error instead of a type.
"""

import importlib
import inspect
import pkgutil
import typing

import numpy as np
import pytest

import datarax
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.typing import IntLike

PACKAGES = ["datarax"] + sorted(
    info.name
    for info in pkgutil.walk_packages(datarax.__path__, "datarax.")
    if info.ispkg
)


def public_callables(package: str) -> list[tuple[str, object]]:
    """``(where, callable)`` for each name in ``package.__all__``: a function, or a
    class, its ``__init__`` and its public methods."""
    module = importlib.import_module(package)
    found: list[tuple[str, object]] = []
    for name in getattr(module, "__all__", ()):
        value = getattr(module, name)
        if inspect.isfunction(value):
            found.append((f"{package}.{name}", value))
        elif inspect.isclass(value):
            found.append((f"{package}.{name}", value))
            found.append((f"{package}.{name}.__init__", value.__init__))
            found.extend(
                (f"{package}.{name}.{attr}", member)
                for attr, member in vars(value).items()
                if inspect.isfunction(member) and not attr.startswith("_")
            )
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_annotation_resolves(package):
    unresolved = []
    for where, target in public_callables(package):
        try:
            typing.get_type_hints(target)
        except Exception as err:  # noqa: BLE001 - each failure is reported by name below
            unresolved.append(f"{where}: {type(err).__name__}: {err}")
    assert unresolved == []


def test_count_arguments_accept_numpy_integers_as_annotated():
    hints = typing.get_type_hints(Pipeline.__init__)
    assert hints["batch_size"] == IntLike and hints["seed"] == IntLike | None
    assert typing.get_args(IntLike) == (int, np.integer[typing.Any])
    weights = typing.get_type_hints(MixSource.__init__)["weights"]
    assert np.ndarray in typing.get_args(weights)
