"""The two ways a pipeline reads a source, and what it reads of one, decided once.

``COMPILED``: the source's traceable ``get_batch_at`` runs inside the compiled step.
``CURSOR``: batches are pulled on the host from a
:class:`~datarax.core.cursor.ReadAheadCursor` (``peek``, ``commit``; ``seek`` on the
source starts a new session). ``INDEXED`` sources are compiled, ``HOST`` and ``STREAM``
read by cursor. :func:`reading_of` asks a source once, at build time; its
:class:`Reading` is kept in the plan.

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
import weakref
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, head_on_host
from datarax.core.cursor import ReadAheadCursor
from datarax.core.data_source import SourceKind, skipping_setting
from datarax.core.errors import ConfigError, SourceContractError
from datarax.core.indexed import TRACER_ERRORS, check_start, position_dtype
from datarax.core.position import seeking_for_owner
from datarax.core.spec import array_fields, checked_batch, checked_spec
from datarax.core.step_cache import cached, step_split
from datarax.host.counts import count_words
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
    """The kind of a source read in ``mode`` (``forward_only``: a stream).

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
    """The :class:`ReadMode` of ``source`` (None: no kind, refused at iteration).

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
    """Whether ``source`` is a stream: read in order only, its length unknown ahead.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> forward_only(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
        False
    """
    return getattr(source, "kind", None) is SourceKind.STREAM


def compiles_whole(children: Any) -> bool:
    """Whether a source built from ``children`` compiles into the step as a whole (every
    child compiled, no host fields).

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
    """Up to ``width`` records of child ``source`` from ``position`` of pass ``epoch``,
    on the host, with their stable indices (int64) and the position after them (past
    records skipped as bad); the batch None at the pass's end.

    ``length``: records per pass (None: a stream). ``who``: the source as messages name
    it. ``skips``: the child's ``skip_state()`` at ``position``, restored if it differs.
    ``reopen``: a new reading session: seek even where the position already matches
    (``nnx.update`` moves no reader). A compiled child is computed at a power-of-two
    width (one traced shape), its position unmoved; a cursor child is moved and read forward.

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
        batch, indices = _compiled_read(source, epoch, epoch * length + position, padded)
        got = min(width, length - position)
        return head_on_host(batch, got), np.asarray(indices, np.int64)[:got], position + got
    if reopen or (source.epoch, source.index) != (epoch, position) or (
        skips is not None and source.skip_state()["skipped"] != skips["skipped"]
    ):  # moved from outside, for its owner
        with seeking_for_owner():
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
            f"{who} handed out {count_words(got, 'record')} but its position moved by "
            f"{end - position}; "
            "a source's position must count the records it hands out."
        )
    stable = np.arange(position, position + got) if indices is None else np.asarray(indices)
    return head_on_host(dict(batch), got), stable.astype(np.int64), end


#: each composite source's last ``(graphdef, step graphdef)``, as ``PassReuse.split`` keeps
#: a pipeline's: reused while its graph definition is unchanged
_LAST_SPLIT: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _compiled_read(source: Any, epoch: int, start: int, size: int) -> tuple[Batch, Any]:
    """``source.get_batch_and_indices_at(start, size)`` (``start`` in pass ``epoch``; rows
    past the pass are not kept). A source built from others (a ``ChildSources``): one
    compiled program per graph definition and size, where op by op its read compiled a
    program per operation; a leaf (a gather, its order on the host) or a source keeping
    text on the host is read as it is."""
    built_from_others = hasattr(source, "child_without_restart")  # core.children imports us
    if source.has_host_fields() or not built_from_others:
        return source.get_batch_and_indices_at(start, size)
    check_start(source, "get_batch_and_indices_at", start, size)
    graphdef, stepdef, state = step_split(source, _LAST_SPLIT.get(source))
    _LAST_SPLIT[source] = (graphdef, stepdef)  # the next read makes no twin
    return _read_program(stepdef, size)(
        source, state, source.epoch_step_inputs(epoch), start)


def _read_program(graphdef: Any, size: int) -> Any:
    """``(source, state, inputs, start) -> (batch, indices)`` of ``size`` records: one
    compiled program, or, where a user's child needs a concrete ``start`` (``int(start)``,
    a Python ``if``), the source's own read op by op as before (remembered per key)."""

    def build() -> Any:
        def read(state: Any, inputs: Any, start: Any) -> tuple[Batch, Any]:
            source = nnx.merge(graphdef, state)
            with source.bind_step_inputs(inputs):
                return source.get_batch_and_indices_at(start, size)

        program = jax.jit(read)
        traceable = [True]

        def run(source: Any, state: Any, inputs: Any, start: int) -> tuple[Batch, Any]:
            if traceable[0]:
                try:
                    return program(state, inputs, np.asarray(start, position_dtype()))
                except (ConfigError, *TRACER_ERRORS) as err:
                    if isinstance(err, ConfigError) and not isinstance(
                            err.__cause__, TRACER_ERRORS):
                        raise
                    traceable[0] = False
            return source.get_batch_and_indices_at(start, size)

        return run

    return cached(("child-read", graphdef, size), build)


def check_child_batch(source: Any, batch: Any, width: int, where: str) -> None:
    """Refuse a child's host batch that does not match its ``element_spec()``, naming
    ``where``: the error names the child, not the joined records."""
    spec = checked_spec(source)
    checked_batch(batch, spec, array_fields(spec), width, where=where, bounded=False)


def skips_in_position(source: Any) -> bool:
    """Whether ``source`` skips bad records and counts them in its position, so its
    served count is known only by reading its pass.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> skips_in_position(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
        False
    """
    return skipping_setting(source) is not None and reading_of(source).counts_skips


@dataclass(frozen=True)
class Reading:
    """How a pipeline reads its source and what the source can do (:func:`reading_of`).

    Attributes:
        mode: the :class:`ReadMode` (None: no kind, refused at iteration).
        kind: the source's :class:`~datarax.core.data_source.SourceKind`.
        read_ahead: the source opens cursors (``batch_cursor()``) for a worker thread.
        reshares: the source serves a share given as runs of positions (``use_share``):
            a state of another process count restores into it.
        counts_skips: the source keeps a ``skipped`` Variable; its ``skip_state()`` is
            what a failed batch puts back.
        closes_epoch: the source has ``close_epoch()``.
        reports_stats: the source has ``stats()``.
        reads_by_position: a read of ``k * size`` records equals ``k`` reads of ``size``.
        reads_in_order: the source reads a given order through its own threaded reader
            (``read_in_order``).
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
        return self.kind is SourceKind.STREAM

    @property
    def kind_name(self) -> str:
        """The kind as messages name it (``"indexed"``, ``"host"``, ``"stream"``)."""
        return "unknown" if self.kind is None else self.kind.value


def reading_of(source: Any) -> Reading:
    """The :class:`Reading` of ``source``: mode, kind and the optional contract parts.

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
    """A cursor over a new reading session of ``source`` from its position; None where
    it is not read through one. ``reading``: its :class:`Reading`, when known.

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
