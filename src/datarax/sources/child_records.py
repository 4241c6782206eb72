"""How a source that reorders other sources' records reads them: forward, from a place.

:class:`ChildRecords` reads a child of either read mode (:func:`~datarax.core.reading.read_at`)
forward from ``(epoch, position)`` for :class:`~datarax.sources.interleave.InterleaveSource`
and :class:`~datarax.sources.shuffle_buffer.ShuffleBufferSource`: a compiled child is
gathered by positions, ``chunk`` records a gather; a cursor-mode child is moved there by
the first read (``seek``: its position alone does not say where its reader stands) and
read in multiples of ``chunk``, so a resumed read meets an over-budget record at the same
batch. Records read ahead stay here, never in state: the owner saves
:attr:`ChildRecords.position`. A child whose position passes its skipped records
(:func:`~datarax.core.reading.skips_in_position`) is read for exactly what is taken and
seeked from its pass's start, so its skip budgets continue exactly.

:func:`share_of` keeps one process's share of a stream's outputs (record ``i`` of each
whole round of ``P``, as every datarax stream); :class:`ForwardReads` serves such a
source's shard batches.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> child = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    >>> reads = ChildRecords(child, epoch=0, position=1, chunk=2)
    >>> [reads.take(3)[0]["x"].tolist(), reads.take(3)[0]["x"].tolist(), reads.take(3)]
    [[1, 2], [3, 4], None]
    >>> reads.position
    5
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datarax.core.batch import take_records
from datarax.core.children import check_children
from datarax.core.config import check_count
from datarax.core.data_source import DataSourceModule
from datarax.core.lengths import length_or_none
from datarax.core.errors import ConfigError, SourceContractError
from datarax.core.module import HostState
from datarax.core.reading import compiled, read_at, skips_in_position
from datarax.core.share import Share
from datarax.core.spec import check_same_fields, checked_spec
from datarax.host.counts import count_words
from datarax.typing import Batch

__all__ = ["CHUNK", "ChildRecords", "ForwardReads", "Stands", "check_source_list", "rows_of",
           "share_of"]

CHUNK = 64  # records read from a child at once (an indexed child: one gather shape)


class ChildRecords(HostState):
    """Records of ``child``'s pass ``epoch`` from ``position`` on (see the module).

    Args:
        child: an unsharded data source of any kind.
        epoch, position: the pass, and the first record taken.
        chunk: records read from the child at once.
        who: the child as messages name it (default: its class).
    """

    def __init__(self, child: DataSourceModule, epoch: int, position: int, *,
                 chunk: int = CHUNK, who: str | None = None) -> None:
        self.child = child
        self.who = who
        self.epoch = epoch
        self.position = position  # the next record to take
        self.chunk = chunk
        self.length = length_or_none(child)
        self.batch: Batch | None = None  # read, from `position` on
        self.stable = np.zeros(0, np.int64)
        self.row = 0  # rows of `batch` taken
        self.compiled = compiled(child)
        self.skips = skips_in_position(child)  # its position passes records it skipped
        self.read_to = 0 if self.skips else position  # the child's position after `batch`
        self.ended = False
        self.opened = False  # the first read moves the child there, wherever it stands

    def take(self, count: int) -> tuple[Batch, np.ndarray] | None:
        """At most ``count`` (>= 1) next records and their stable indices, or None at the
        pass's end; fewer than ``count`` only where a read ends."""
        if self.batch is None or self.row >= len(self.stable):
            if not self._read(count):
                return None
        assert self.batch is not None
        start, stop = self.row, min(self.row + count, len(self.stable))
        self.row = stop
        self.position += stop - start
        return rows_of(self.batch, start, stop), self.stable[start:stop]

    def _read(self, count: int) -> bool:
        if self.ended or (self.skips and not self.opened and not self._replay()):
            return False
        child, start = self.child, self.read_to
        # a compiled child reads no further than asked: one traced shape, `chunk`
        width = (count if self.skips else self.chunk if self.compiled
                 else self.chunk - start % self.chunk)
        batch, stable, end = read_at(child, self.epoch, start, width, self.length,
                                     who=self.who, reopen=not self.opened)
        self.opened = True
        if batch is None:
            self.ended = True
            return False
        got = len(stable)
        if end != start + got and not self.skips:  # a cursor-mode child that skipped records
            raise SourceContractError(
                f"{type(child).__name__} handed out {count_words(got, 'record')} from position "
                f"{start} of "
                f"pass {self.epoch} but now stands at {child.index} of pass {child.epoch}; "
                "a child's position must count the records it hands out."
            )
        self.batch, self.stable, self.row, self.read_to = batch, stable, 0, end
        return True

    def _replay(self) -> bool:
        """Stand a child that skips bad records after its first :attr:`position` records:
        read its pass again from the start (False: it ends before them)."""
        self.opened, left, self.read_to = True, self.position, 0
        self.child.seek(self.epoch, 0)  # at the pass's start: nothing skipped yet
        while left:
            batch, stable, self.read_to = read_at(self.child, self.epoch, self.read_to,
                                                  min(left, self.chunk), self.length,
                                                  who=self.who)
            if batch is None:
                self.ended = True
                return False
            left -= len(stable)
        return True


def check_source_list(owner: str, children: Any, kind: str, *, call: str, whole: str,
                      joined: str, action: str) -> None:
    """Refuse ``children`` unless a non-empty list of distinct, unsharded sources of
    one element spec, each named ``f"{kind} {i}"`` (``call``: how to pass a list;
    ``whole``, ``joined`` and ``action`` as :func:`~datarax.core.children.check_children`
    and :func:`~datarax.core.spec.check_same_fields` take them)."""
    if isinstance(children, (str, bytes, Mapping)) or not isinstance(children, Sequence):
        raise ConfigError(
            f"{owner} takes a list of sources, got {type(children).__name__}; pass {call}.")
    if not children:
        raise ConfigError(f"{owner} needs at least one source; got an empty list.")
    labels = [str(i) for i in range(len(children))]
    check_children(owner, kind, labels, children, whole=whole)
    check_same_fields(owner, [f"{kind} {i}" for i in labels],
                      [checked_spec(c) for c in children], joined, action)


def rows_of(batch: Batch, start: int, stop: int) -> Batch:
    """Records ``start .. stop - 1`` of a host batch: views of its arrays, slices of its
    text lists (nothing copied).

    Example:
        >>> rows_of({"x": np.arange(5), "meta": {"t": list("abcde")}}, 1, 3)
        {'x': array([1, 2]), 'meta': {'t': ['b', 'c']}}
    """
    return {k: rows_of(v, start, stop) if isinstance(v, dict) else v[start:stop]
            for k, v in batch.items()}


def share_of(batch: Batch, stable: np.ndarray, share: Share) -> tuple[Batch, np.ndarray] | None:
    """``share``'s records of consecutive outputs that start a round: record ``index``
    of each whole round of ``count`` (a partial last round is left out); None if none.

    Example:
        >>> share_of({"x": np.arange(7)}, np.arange(7), Share(1, 3))[0]["x"].tolist()
        [1, 4]
    """
    whole = len(stable) - len(stable) % share.count
    rows = np.arange(share.index, whole, share.count)
    if not len(rows):
        return None
    return take_records(batch, rows), stable[rows]


class Stands(HostState):
    """Where a :class:`ForwardReads` source's reading stands (``_where()`` at its last
    read), None once the position moved from outside or a read failed."""

    def __init__(self) -> None:
        self.at: tuple[int, ...] | None = None


class ForwardReads:
    """Mixin of a stream-kind source serving its children's records in an order of its
    own (interleave, shuffle buffer, flat map): :meth:`_read` reads on while the reading
    stands at :meth:`_where` (``self._stands``), else ``_open()`` stands it there first."""

    _stands: Stands

    def _where(self) -> tuple[int, ...]:
        """Where the reading must stand to go on (default: the position)."""
        return self.datarax_position.where()  # type: ignore[attr-defined]

    def _stood(self) -> None:
        """The reading stands at :meth:`_where` (after an open or a read)."""
        self._stands.at = self._where()

    def _moved(self) -> None:
        self._stands.at = None

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """This shard's next records (at most ``batch_size``) and their stable indices;
        ``(None, None)`` at the pass's end."""
        batch_size = check_count(batch_size, f"{type(self).__name__} batch_size", 1)
        if self._stands.at != self._where():
            self._open()  # type: ignore[attr-defined]
        try:
            mine = self._read(batch_size)
        except Exception:
            self._moved()  # a retry reads again from the position (and saved place)
            raise
        if mine is not None:
            self.datarax_position.advance(len(mine[1]))  # type: ignore[attr-defined]
        self._stood()
        return (None, None) if mine is None else mine

    def _read(self, batch_size: int) -> tuple[Batch, np.ndarray] | None:
        """This shard's next records: its share of ``_outputs(count)``, the pass's next
        ``count`` records (every shard's; fewer only at its end); None at the end."""
        shard = self.shard  # type: ignore[attr-defined]
        batch, stable = self._outputs(batch_size * shard.count)  # type: ignore[attr-defined]
        return None if batch is None else share_of(batch, stable, shard)
