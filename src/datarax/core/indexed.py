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
    >>> src.kind.value, [int(r["x"]) for r in src]
    ('indexed', [0, 1, 4, 9])
"""

from __future__ import annotations

from typing import ClassVar

from datarax.core.data_source import DataSourceModule, SourceKind


class IndexedSource(DataSourceModule):
    """An indexed (random access, traceable) source; see the module docstring."""

    kind: ClassVar[SourceKind | None] = SourceKind.INDEXED

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must implement __len__")
