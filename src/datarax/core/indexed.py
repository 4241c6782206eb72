"""``IndexedSource``: the base of sources a Pipeline runs as one compiled step per batch.

Implement ``__len__`` and a stateless, JAX-traceable ``get_batch_at(start, size, key)``
(``start`` is a global position: epoch ``e`` starts at ``e * len(self)``; wrap with
``% len(self)``). A source that shuffles, partitions or mixes records also overrides
``record_indices_at`` so stochastic stages key each record on its stable index.
Position, state, shards and record iteration come from
:class:`~datarax.core.data_source.DataSourceModule`.

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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datarax.core.batch import record_at
from datarax.core.data_source import DataSourceModule, SourceKind, length_or_none
from datarax.core.spec import array_to_spec_strip_leading
from datarax.typing import Batch


class IndexedSource(DataSourceModule, kind_base=SourceKind.INDEXED):
    """An indexed (random access, traceable) source; see the module docstring."""

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must implement __len__")

    def supports_indexed_access(self) -> bool:
        """True: defining ``get_batch_at`` is what makes a source indexed (also
        ``source.kind is SourceKind.INDEXED``)."""
        return True

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        """``size`` records starting at global position ``start`` (stateless, traceable)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_batch_at")

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index of each record ``get_batch_at(start, size, key)`` serves: by
        default its position (``(start + i) % len(self)``), right for records in order."""
        positions = jnp.arange(size) + start
        n = length_or_none(self)
        return positions if n is None else positions % n

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """``(get_batch_at(...), record_indices_at(...))`` in one call (traceable); a source
        that computes the indices anyway (a shuffled one) overrides it to trace them once."""
        return self.get_batch_at(start, size, key), self.record_indices_at(start, size, key)

    def reads_by_position(self) -> bool:
        """Whether records depend on their global positions alone (never on ``key``), so a
        Pipeline without stages may read ``k`` small batches as one (default False)."""
        return False

    def step_inputs(self) -> Any:
        """Arrays the compiled step receives as arguments rather than as NNX state
        (a source keeping its records out of ``nnx.state``); default none."""
        return None

    def bind_step_inputs(self, inputs: Any) -> contextlib.AbstractContextManager[Any]:
        """Inside the compiled step: make :meth:`step_inputs` read as ``inputs``."""
        return contextlib.nullcontext()

    def has_host_fields(self) -> bool:
        """True for a source that keeps some fields (text) on the host: the compiled step
        gathers the device fields, Pipeline adds the others with :meth:`with_host_fields`."""
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
            epochs = self._direct_passes()
            if epochs >= 0 and self.epoch + 1 >= epochs:
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
