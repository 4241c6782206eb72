"""Error types raised by datarax (documented as :mod:`datarax.core.errors`) and
:func:`error_chain`. Imports no other part of datarax, so it loads no JAX.
"""

from __future__ import annotations

from collections.abc import Iterator


class DataraxError(ValueError):
    """Base class of every error datarax raises on bad input."""


class ConfigError(DataraxError):
    """A config field has a wrong type or value."""


class SpecMismatchError(DataraxError):
    """A batch does not match its source's ``element_spec()``; ``fields`` names them."""

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = list(fields or [])


class StateError(DataraxError):
    """A state dict cannot be restored here; ``field`` names the setting or key that differs."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StaleIteratorError(DataraxError):
    """An iterator was used after a newer ``iter(pipeline)`` ended it (one live
    iterator per pipeline)."""


class SourceContractError(DataraxError, TypeError):
    """An object used as a source or stage does not implement the required contract."""


class RecordError(DataraxError):
    """A record could not be read or decoded; ``path`` and ``index`` say where."""

    def __init__(
        self, message: str, *, path: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.index = index


class SourceChangedError(DataraxError):
    """A file (``path``) was written over while the source had it open; it stops the read
    under every ``on_error`` policy (the file is not the one opened, not a bad record)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class MissingExtraError(DataraxError, ImportError):
    """An optional package a feature needs is not installed (the message names the
    ``pip install`` command); also an ``ImportError``."""


# their documented home (tracebacks, docs and pickles name it)
for _error in (DataraxError, ConfigError, SpecMismatchError, StateError, StaleIteratorError,
               SourceContractError, RecordError, SourceChangedError, MissingExtraError):
    _error.__module__ = "datarax.core.errors"
del _error


def error_chain(err: BaseException, *, context: bool = True) -> Iterator[BaseException]:
    """``err``, then the error it was raised from (``__cause__``; else, with ``context``,
    the one being handled when it was raised: ``__context__``), and so on, each once.

    Example:
        >>> try:
        ...     try:
        ...         raise KeyError("a")
        ...     except KeyError as inner:
        ...         raise OSError("b") from inner
        ... except OSError as outer:
        ...     [type(e).__name__ for e in error_chain(outer)]
        ['OSError', 'KeyError']
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (current.__context__ if context else None)
