"""``IndexedSource``: the base of sources a Pipeline runs as one compiled step per batch.

Implement ``__len__`` and a stateless, JAX-traceable ``get_batch_at(start, size, key)``
(``start`` is global: epoch ``e`` starts at ``e * len(self)``; wrap with ``% len(self)``).
A source that reorders records also overrides ``record_indices_at``, so stochastic
stages key each record on its stable index.

Example:
    >>> import jax.numpy as jnp
    >>> from datarax.core.config import StructuralConfig
    >>> class Squares(IndexedSource):
    ...     def __len__(self):
    ...         return 4
    ...     def get_batch_at(self, start, size, key=None):
    ...         i = (jnp.arange(size) + start) % 4
    ...         return {"x": i * i}
    >>> src = Squares(StructuralConfig())
    >>> src.kind.value, [int(r["x"]) for r in src], src.record_indices_at(3, 2).tolist()
    ('indexed', [0, 1, 4, 9], [3, 0])
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datarax.core.batch import record_at
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import length_or_none
from datarax.core.spec import array_to_spec_strip_leading
from datarax.core.errors import ConfigError, first_line
from datarax.typing import Batch


class IndexedSource(DataSourceModule, kind_base=SourceKind.INDEXED):
    """An indexed (random access, traceable) source; see the module docstring.

    A concrete ``start`` must be ``>= 0`` (and, without x64, ``start + size <= 2**31``),
    else :class:`~datarax.errors.ConfigError`; a traced one is not checked.
    """

    @classmethod
    def _adopt_subclass(cls) -> None:
        # a source's own get_batch_at / get_batch_and_indices_at check a concrete start
        for name in _READS:
            method = cls.__dict__.get(name)
            if method is not None:
                setattr(cls, name, _checking_start(method, name))

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} implements get_batch_at but not __len__: "
                        "define __len__(self), the number of records one epoch holds.")

    def supports_indexed_access(self) -> bool:
        """True (also ``source.kind is SourceKind.INDEXED``)."""
        return True

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        """``size`` records starting at global position ``start`` (stateless, traceable).

        ``key``: the batch's key in a Pipeline, else None. A draw from it changes with
        ``batch_size``; draw per-record randomness in a stochastic stage instead."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_batch_at")

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index of each record ``get_batch_at(start, size, key)`` serves (default:
        ``(start + i) % len(self)``)."""
        positions = jnp.arange(size) + start
        n = length_or_none(self)
        return positions if n is None else positions % n

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """``(get_batch_at(...), record_indices_at(...))`` in one traceable call."""
        check_start(self, "get_batch_and_indices_at", start, size)
        return self.get_batch_at(start, size, key), self.record_indices_at(start, size, key)

    def reads_by_position(self) -> bool:
        """Whether records depend on their global positions alone (never on ``key``), so a
        Pipeline without stages may read ``k`` small batches as one (default False)."""
        return False

    def step_inputs(self) -> Any:
        """Arrays the compiled step receives as arguments rather than NNX state; default none."""
        return None

    def epoch_step_inputs(self, epoch: int) -> Any:
        """The step inputs of epoch ``epoch``'s pass alone (default :meth:`step_inputs`)."""
        return self.step_inputs()

    def bind_step_inputs(self, inputs: Any) -> contextlib.AbstractContextManager[Any]:
        """Inside the compiled step: make :meth:`step_inputs` read as ``inputs``."""
        return contextlib.nullcontext()

    def has_host_fields(self) -> bool:
        """True for a source keeping some fields (text) on the host (:meth:`with_host_fields`)."""
        return False

    def with_host_fields(self, batch: Batch, start: int, size: int) -> tuple[Batch, Any]:
        """``batch`` (the device fields of ``get_batch_at(start, size)``) with the host
        fields of the same records added, and the records' stable indices."""
        raise NotImplementedError(f"{type(self).__name__} keeps no fields on the host")

    def element_spec(self) -> dict[str, Any]:
        """Per-record keys, shapes and dtypes: ``get_batch_at(0, 1)`` traced abstractly."""
        shapes = jax.eval_shape(lambda: self.get_batch_at(0, 1, None))
        return jax.tree.map(array_to_spec_strip_leading, shapes)

    def _next_record(self) -> tuple[Batch, int]:
        n = len(self)
        lo, hi = self.shard.bounds(n)
        if self.index >= hi - lo:
            if self._last_direct_pass():
                self._note_direct_end()
                raise StopIteration
            self.datarax_position.move(self.epoch + 1, 0)
        if hi == lo:
            raise StopIteration
        record, stable = self._read_record(self.epoch, lo + self.index)
        self.datarax_position.advance(1)
        return record, stable

    def _read_record(self, epoch: int, index: int) -> tuple[Batch, int]:
        """One record at ``index`` of pass ``epoch`` and its stable index."""
        start = epoch * len(self) + index
        batch = self.get_batch_at(start, 1, None)
        stable = int(np.asarray(self.record_indices_at(start, 1, None))[0])
        return record_at(batch, 0), stable


def position_dtype() -> Any:
    """The dtype of global record positions: int64 with ``jax_enable_x64``, else int32."""
    return np.int64 if jax.config.jax_enable_x64 else np.int32


_READS = ("get_batch_at", "get_batch_and_indices_at")

TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _checking_start(method: Any, name: str) -> Any:
    """``method``, refusing a bad concrete ``start`` and naming itself on tracer errors."""

    @functools.wraps(method)
    def read(self: IndexedSource, start: Any, size: int, *args: Any, **kwargs: Any) -> Any:
        check_start(self, name, start, size)
        if not isinstance(start, jax.core.Tracer):
            return method(self, start, size, *args, **kwargs)
        try:
            return method(self, start, size, *args, **kwargs)
        except TRACER_ERRORS as err:
            raise traced_read_error(self, name, err) from err

    return read


def traced_read_error(source: Any, method: str, err: BaseException) -> ConfigError:
    """The error for a ``get_batch_at`` that needed a concrete value of its traced ``start``.

    Example:
        >>> from datarax.core.config import StructuralConfig
        >>> class Slices(IndexedSource):
        ...     def __len__(self):
        ...         return 4
        ...     def get_batch_at(self, start, size, key=None):
        ...         return {"x": jnp.arange(4)[int(start):int(start) + size]}
        >>> jax.jit(lambda s: Slices(StructuralConfig()).get_batch_at(s, 2))(0)
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: Slices.get_batch_at needs a concrete value of a traced array ...
    """
    first = first_line(err)
    return ConfigError(
        f"{type(source).__name__}.{method} needs a concrete value of a traced array "
        f"({type(err).__name__}: {first}). A Pipeline compiles {method}: start is a traced "
        "integer there, not a Python int (size is one). Compute the records' indices with "
        "jax.numpy, e.g. i = (jnp.arange(size) + start) % len(self); return "
        "{'x': self.x[i]}, instead of int(start), slices data[start:start + size] or "
        "Python if on values."
    )


def check_start(source: Any, method: str, start: Any, size: Any) -> None:
    """Refuse a concrete ``start`` below 0 or (int32 positions) with ``start + size`` past
    ``2**31``."""
    if isinstance(start, jax.core.Tracer) or isinstance(start, (bool, np.bool_)):
        return
    if isinstance(start, (int, np.integer)):
        value = int(start)
    elif (isinstance(start, (np.ndarray, jax.Array)) and start.ndim == 0
          and np.issubdtype(start.dtype, np.integer)):
        value = int(start)
    else:
        return
    count = int(size) if isinstance(size, (int, np.integer)) else 0
    limit = None if jax.config.jax_enable_x64 else 2**31 - max(count, 0)
    if value >= 0 and (limit is None or value <= limit):
        return
    valid = "0 or more" if limit is None else f"0 .. {limit} (start + size <= 2**31 int32 positions)"
    raise ConfigError(
        f"{type(source).__name__}.{method}: start={value} is not a global record position; "
        f"valid starts are {valid}. Epoch e of this {_length(source)}-record source starts "
        f"at e * {_length(source)}; pass the position of the first record you want "
        "(a record from the end of the source: len(source) - k)."
    )


def _length(source: Any) -> str:
    n = length_or_none(source)
    return "?" if n is None else str(n)
