"""Error types raised by datarax, documented as :mod:`datarax.core.errors` (which names
them), and :func:`error_chain`; this module imports no other part of datarax, so a
process that needs only them loads no JAX.

Every error says what was wrong, where (file, record index, field or setting) and what
to do about it. All derive from :class:`DataraxError`, itself a ``ValueError`` so code
that already catches ``ValueError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator


class DataraxError(ValueError):
    """Base class of every error datarax raises on bad input."""


class ConfigError(DataraxError):
    """A config field has a wrong type or value."""


class SpecMismatchError(DataraxError):
    """A batch does not match the ``element_spec()`` its source declares.

    ``fields`` lists the names of the fields that disagree.
    """

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = list(fields or [])


class StateError(DataraxError):
    """A state dict cannot be restored here: from another configuration, or tampered.

    ``field`` names the setting or key that differs.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StaleIteratorError(DataraxError):
    """An iterator was used after a newer ``iter(pipeline)`` ended it (one live
    iterator per pipeline)."""


class SourceContractError(DataraxError, TypeError):
    """An object used as a source or stage does not implement the required contract."""


class RecordError(DataraxError):
    """A record could not be read or decoded.

    ``path`` and ``index`` say where (file and record index within the file).
    """

    def __init__(
        self, message: str, *, path: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.index = index


class SourceChangedError(DataraxError):
    """A file a source reads was written over while the source was open (a memory-mapped
    file cut short in place). It stops the read under every ``on_error`` policy: the
    records are not bad, the file is not the one the source opened.

    ``path`` names the file.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class MissingExtraError(DataraxError, ImportError):
    """An optional package a feature needs is not installed.

    The message names the package and the ``pip install "datarax[extra]"`` command that
    adds it (see :func:`datarax.core.extras.require`). It is also an ``ImportError``, so
    code guarding an optional import keeps working.
    """


# Their documented home (tracebacks, docs and pickles name it); defined here so that a
# process that needs only them (a dataset writer's worker) does not import JAX or Flax.
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
