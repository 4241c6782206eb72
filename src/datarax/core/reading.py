"""The two ways a pipeline reads a source, and what it reads of one, decided once.

A pipeline does one of two things with a source (:class:`ReadMode`):

* ``COMPILED`` — compute a batch at positions inside the compiled step: the source's
  traceable ``get_batch_at`` (or ``get_batch_and_indices_at``) runs in the same
  program as the stages, the position moving by what is handed out;
* ``CURSOR`` — pull batches from a cursor on the host: ``peek`` reads ahead without
  moving the position, ``commit`` moves it past what was handed out, ``seek`` (on the
  source) starts a new reading session (:class:`~datarax.core.cursor.ReadAheadCursor`,
  the one cursor protocol).

The three kinds (:class:`~datarax.core.data_source.SourceKind`) are one level down:
``INDEXED`` is the compiled mode, ``HOST`` and ``STREAM`` both the cursor mode (a stream
only read forward). :func:`reading_of` derives a source's mode, its kind and what else a
pipeline asks of it once, when the pipeline is built; the result, a :class:`Reading`,
is kept in the plan and passed by argument, so nothing asks the source again per pass
or per batch. :func:`read_mode` answers the mode alone, for a source built from other
sources asking of its children; :func:`cursor_of` opens a cursor for one reading session.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    >>> reading = reading_of(source)
    >>> reading.mode.value, reading.kind.value, reading.compiled, cursor_of(source) is None
    ('compiled', 'indexed', True, True)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, head_on_host
from datarax.core.cursor import ReadAheadCursor
from datarax.core.data_source import SourceKind, skipping_setting
from datarax.core.errors import SourceContractError
from datarax.core.spec import array_fields, checked_batch, checked_spec
from datarax.typing import Batch

__all__ = [
    "ReadMode", "Reading", "compiled", "compiles_whole", "cursor_of", "forward_only",
    "kind_for", "read_at", "read_mode", "reading_of", "skips_in_position",
]


class ReadMode(enum.Enum):
    """What a pipeline does with a source's records."""

    COMPILED = "compiled"  # a batch computed at positions inside the compiled step
    CURSOR = "cursor"  # pulled from a cursor on the host: peek, commit, seek


_MODE_OF_KIND = {
    SourceKind.INDEXED: ReadMode.COMPILED,
    SourceKind.HOST: ReadMode.CURSOR,
    SourceKind.STREAM: ReadMode.CURSOR,
}


def kind_for(mode: ReadMode, *, forward_only: bool = False) -> SourceKind:
    """The kind of a source read in ``mode`` (``forward_only``: a cursor-mode source
    read in order only, a stream): how a source built from others states the kind its
    mode gives it, once, when it is built.

    Example:
        >>> kind_for(ReadMode.COMPILED).value, kind_for(ReadMode.CURSOR).value
        ('indexed', 'host')
        >>> kind_for(ReadMode.CURSOR, forward_only=True).value
        'stream'
    """
    if mode is ReadMode.COMPILED:
        return SourceKind.INDEXED
    return SourceKind.STREAM if forward_only else SourceKind.HOST


def read_mode(source: Any) -> ReadMode | None:
    """The :class:`ReadMode` of ``source`` (None: a source of no kind, refused when
    iteration starts).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> read_mode(MemorySource(MemorySourceConfig(), {"x": np.arange(3)})).value
        'compiled'
    """
    return _MODE_OF_KIND.get(getattr(source, "kind", None))  # type: ignore[arg-type]


def compiled(source: Any) -> bool:
    """Whether ``source`` is read inside the compiled step (:attr:`ReadMode.COMPILED`).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> compiled(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
        True
    """
    return read_mode(source) is ReadMode.COMPILED


def forward_only(source: Any) -> bool:
    """Whether ``source`` is a stream: read in order only (a cursor-mode source that
    cannot be read at a position), its length unknown ahead.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> forward_only(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
        False
    """
    return getattr(source, "kind", None) is SourceKind.STREAM


def compiles_whole(children: Any) -> bool:
    """Whether a source built from ``children`` compiles into the step as a whole: every
    child is compiled and keeps no field on the host (a composite's mode, decided when it
    is built).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> compiles_whole([MemorySource(MemorySourceConfig(), {"x": np.arange(3)})])
        True
    """
    return all(compiled(c) and not c.has_host_fields() for c in children)


def read_at(source: Any, epoch: int, position: int, width: int, length: int | None, *,
            who: str | None = None, skips: dict[str, Any] | None = None, reopen: bool = False,
            ) -> tuple[Batch | None, np.ndarray, int]:
    """Up to ``width`` records of ``source`` from ``position`` of its pass ``epoch``, on
    the host (device arrays as numpy, text as lists), their stable indices (int64) and
    the position after them (``end``, as a cursor's ``peek`` gives it: past the records
    a source skipped as bad); the batch None at the pass's end. ``length``: the source's
    records per pass (None: a stream). ``who``: the source as messages name it.
    ``skips``: for a child that counts the records it skips as bad, its ``skip_state()``
    at ``position`` (a child standing there with another count is moved there and given
    it whole, so each of its skip budgets continues exactly).
    ``reopen``: the first read of a new reading session — a cursor-mode child is moved
    there even where its position says it stands there (a position set by
    ``nnx.update`` says nothing of where its reader stands).

    The one read a source built from others makes of a child, in either mode: a compiled
    child is computed at those positions (``width`` rounded up to a power of two: reads
    of up to that many reuse one traced shape, the rest cut on the host), its position
    unmoved; a cursor-mode child is moved there where it stands elsewhere (even at the
    pass's end) and read forward, its position moving past what it passes.

    Raises:
        SourceContractError: a cursor-mode child that ends its pass before its length,
            or whose position moves by less than the records it hands out.
        SpecMismatchError: a cursor-mode child's batch that does not match its
            ``element_spec()`` (:func:`check_child_batch`).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> child = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
        >>> batch, stable, end = read_at(child, 0, 3, 4, len(child))
        >>> batch["x"].tolist(), stable.tolist(), end, child.index
        ([3, 4], [3, 4], 5, 0)
        >>> read_at(child, 0, 5, 4, len(child))[0] is None
        True
    """
    none = np.zeros(0, np.int64)
    if compiled(source):
        assert length is not None  # a compiled source knows its length
        if position >= length:
            return None, none, position
        padded = 1 << max(width - 1, 0).bit_length()
        batch, indices = source.get_batch_and_indices_at(epoch * length + position, padded)
        got = min(width, length - position)
        return head_on_host(batch, got), np.asarray(indices, np.int64)[:got], position + got
    if reopen or (source.epoch, source.index) != (epoch, position) or (
        skips is not None and source.skip_state()["skipped"] != skips["skipped"]
    ):  # moved from outside
        source.seek(epoch, position)
        if skips is not None:
            source.restore_skip_state(skips)
    if length is not None and position >= length:
        return None, none, position
    batch, indices = source.get_batch_with_indices(width)
    who = who or type(source).__name__
    if source.epoch != epoch:  # a source that moved itself to its next pass
        end = position if length is None else length
    else:
        end = max(source.index, position)
    if batch is None:
        if length is not None and end < length:
            raise SourceContractError(
                f"{who} ended its pass {epoch} at position {end}; its length says {length}. "
                "A source read by another must pass every position of its length (records "
                "it hands out plus records it skips as bad)."
            )
        return None, none, end
    check_child_batch(source, batch, width, f"{who} batch at position {position} of pass {epoch}")
    got = batch_length(batch)
    if source.epoch == epoch and end - position < got:
        raise SourceContractError(
            f"{who} handed out {got} records but its position moved by {end - position}; "
            "a source's position must count the records it hands out."
        )
    stable = np.arange(position, position + got) if indices is None else np.asarray(indices)
    return head_on_host(dict(batch), got), stable.astype(np.int64), end


def check_child_batch(source: Any, batch: Any, width: int, where: str) -> None:
    """Refuse a batch a child read on the host hands out unless it matches the child's
    ``element_spec()`` (a :class:`~datarax.core.errors.SpecMismatchError` naming
    ``where`` and the field), so a source built from others names the child that
    broke its spec, not the records it joined (a ``KeyError``, a widened dtype)."""
    spec = checked_spec(source)
    checked_batch(batch, spec, array_fields(spec), width, where=where, bounded=False)


def skips_in_position(source: Any) -> bool:
    """Whether ``source`` skips bad records and counts them in its position (it gives a
    ``skip_state()``): its position counts the records it passed, not those it served,
    so a source reading it finds a count of its records only by reading its pass. A
    source that skips inside (a flat map over skipping parts) serves every position it
    passes.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> skips_in_position(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
        False
    """
    return skipping_setting(source) is not None and reading_of(source).counts_skips


@dataclass(frozen=True)
class Reading:
    """How a pipeline reads its source, and what the source can do: decided once, by
    :func:`reading_of`, when the pipeline is built (a frozen value: part of the plan).

    Attributes:
        mode: the :class:`ReadMode` (None: a source of no kind, refused at iteration).
        kind: the source's :class:`~datarax.core.data_source.SourceKind` (named in
            messages; ``STREAM`` is :attr:`forward_only`).
        read_ahead: the source opens cursors (``batch_cursor()``) for a worker thread
            to read ahead on; otherwise it is read on the loop's thread.
        reshares: the source can serve a share of an epoch given as runs of positions
            (``use_share``): a state saved by another process count restores into it.
        counts_skips: the source keeps a ``skipped`` Variable (records skipped as bad
            this epoch): its ``skip_state()`` is what a failed batch puts back.
        closes_epoch: the source has ``close_epoch()`` (stops its readers, keeping the
            position).
        reports_stats: the source has ``stats()`` (its own counters, e.g. storage).
        reads_by_position: the source says a read of ``k * size`` records is ``k``
            consecutive reads of ``size`` (its records depend on their positions alone).
        reads_in_order: the source reads the records of an order it is given through
            its own threaded reader (``read_in_order``: a mixture's sampled draws).
    """

    mode: ReadMode | None
    kind: SourceKind | None
    read_ahead: bool = False
    reshares: bool = False
    counts_skips: bool = False
    closes_epoch: bool = False
    reports_stats: bool = False
    reads_by_position: bool = False
    reads_in_order: bool = False

    @property
    def compiled(self) -> bool:
        """Whether batches are computed inside the compiled step."""
        return self.mode is ReadMode.COMPILED

    @property
    def forward_only(self) -> bool:
        """Whether the source is a stream: read in order only, its length unknown ahead."""
        return self.kind is SourceKind.STREAM  # as :func:`forward_only` says of a source

    @property
    def kind_name(self) -> str:
        """The kind as messages name it (``"indexed"``, ``"host"``, ``"stream"``)."""
        return "unknown" if self.kind is None else self.kind.value


def reading_of(source: Any) -> Reading:
    """The :class:`Reading` of ``source``: its mode and kind, and the optional parts of
    the source contract it implements, asked here once.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> reading_of(MemorySource(MemorySourceConfig(), {"x": np.arange(3)})).read_ahead
        False
    """
    kind = getattr(source, "kind", None)
    mode = read_mode(source)
    says_by_position = getattr(source, "reads_by_position", None)
    return Reading(
        mode=mode,
        kind=kind,
        read_ahead=callable(getattr(source, "batch_cursor", None)),
        reshares=kind is not SourceKind.STREAM and (
            mode is ReadMode.COMPILED or callable(getattr(source, "use_share", None))),
        counts_skips=isinstance(getattr(source, "skipped", None), nnx.Variable),
        closes_epoch=callable(getattr(source, "close_epoch", None)),
        reports_stats=callable(getattr(source, "stats", None)),
        reads_by_position=(mode is ReadMode.COMPILED and callable(says_by_position)
                           and bool(says_by_position())),
        reads_in_order=callable(getattr(source, "read_in_order", None)),
    )


def cursor_of(source: Any, reading: Reading | None = None) -> ReadAheadCursor | None:
    """A cursor over one new reading session of ``source``, from its position — or None
    where the source is not read through one (compiled, or read on the loop's thread).

    ``reading``: the source's :class:`Reading` when known (a pipeline passes its plan's).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from datarax.sources import NpySource, NpySourceConfig
        >>> path = os.path.join(tempfile.mkdtemp(), "x.npy"); np.save(path, np.arange(5))
        >>> src = NpySource(NpySourceConfig(paths=path))
        >>> cursor = cursor_of(src)
        >>> cursor.peek(2)[2], src.index  # read ahead: the position stays
        (2, 0)
        >>> cursor.commit(2); src.index
        2
        >>> cursor.release(); src.close()
    """
    reading = reading_of(source) if reading is None else reading
    if reading.mode is not ReadMode.CURSOR or not reading.read_ahead:
        return None
    return source.batch_cursor()
