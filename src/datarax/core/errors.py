"""Error types raised by datarax.

Every error says what was wrong, where (file, record index, field or setting) and what
to do about it. All derive from :class:`DataraxError`, itself a ``ValueError`` so code
that already catches ``ValueError`` keeps working. They are defined in
:mod:`datarax.errors` (which imports nothing else) and named here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from datarax.errors import (
    DataraxError,
    ConfigError,
    SpecMismatchError,
    StateError,
    StaleIteratorError,
    SourceContractError,
    RecordError,
    SourceChangedError,
    MissingExtraError,
)

__all__ = [
    "DataraxError",
    "ConfigError",
    "SpecMismatchError",
    "StateError",
    "StaleIteratorError",
    "SourceContractError",
    "RecordError",
    "SourceChangedError",
    "MissingExtraError",
]


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message, without its closing full stop ("" if none):
    how an error quotes the cause it explains.

    Example:
        >>> first_line(TypeError("Abstract tracer value. See the docs."))
        'Abstract tracer value. See the docs'
        >>> first_line(KeyError())
        ''
    """
    text = str(err).strip()
    return text.splitlines()[0].rstrip(".") if text else ""


def callable_name(fn: Any) -> str:
    """How a message names ``fn``: its ``__name__``, else its type's name (a callable
    object, a ``functools.partial``).

    Example:
        >>> import functools
        >>> def step(batch): ...
        >>> callable_name(step), callable_name(functools.partial(step))
        ('step', 'partial')
    """
    return getattr(fn, "__name__", type(fn).__name__)


def refused_call(fn: Callable[..., Any], *args: Any) -> tuple[inspect.Signature, TypeError] | None:
    """``(fn's signature, Python's TypeError)`` where ``fn`` cannot be called with
    ``args``; None where it can, or where its signature cannot be read.

    Example:
        >>> def step(model, batch): ...
        >>> signature, err = refused_call(step, {})
        >>> f"step{signature}: {err}"
        "step(model, batch): missing a required argument: 'batch'"
        >>> refused_call(lambda batch: batch, {}) is None
        True
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*args)
    except TypeError as err:
        return signature, err
    return None
