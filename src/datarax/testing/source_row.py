"""``SourceRow``: one row of the source conformance table (see :mod:`.conformance`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from datarax.testing.resume import compare_fields, to_host
from datarax.typing import Batch

Level = Literal["iterator", "pipeline", "source", "nnx"]


@dataclass(frozen=True)
class SourceRow:
    """One row of the conformance table.

    Attributes:
        name: the row's test id.
        make: ``make(shard_index=0, shard_count=1, stages=())`` builds a new source and
            Pipeline over it, sharing nothing between calls.
        num_records: records in the dataset.
        record_ids: each record's id in a host batch, ints in ``range(num_records)``.
        shuffled: the row shuffles, so consecutive epochs come in different orders.
        kind: the ``SourceKind`` member name the source declares (``"INDEXED"``,
            ``"HOST"`` or ``"STREAM"``); None: not checked.
        data_in_state: the source keeps its records in ``nnx.data``, so
            :func:`check_nnx_state_small` checks only that leaves are arrays.
    """

    name: str
    make: Callable[..., Any]
    num_records: int
    record_ids: Callable[[Batch], Sequence[int]]
    shuffled: bool = False
    kind: str | None = None
    data_in_state: bool = False

    def close(self, pipeline: Any) -> None:
        """Release what ``pipeline``'s source holds."""
        close = getattr(pipeline.source, "close", None)
        if close is not None:
            close()

    @contextlib.contextmanager
    def built(self, **settings: Any) -> Iterator[Any]:
        """A pipeline :attr:`make` builds with ``settings``, closed when the block ends."""
        pipeline = self.make(**settings)
        try:
            yield pipeline
        finally:
            self.close(pipeline)


def run_epochs(pipeline: Any, num_epochs: int) -> list[list[Batch]]:
    """The host batches of ``num_epochs`` ``for batch in pipeline`` loops in a row."""
    return [[to_host(batch) for batch in pipeline] for _ in range(num_epochs)]


def compare_row(row: SourceRow, where: str, expected: Batch, got: Batch) -> None:
    """Raise naming ``row`` and ``where`` unless the two host batches are equal."""
    compare_fields(f"{row.name}, {where}", expected, got)
