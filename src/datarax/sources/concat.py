"""``ConcatSource``: several sources one after another, usable wherever a source is.

Epoch ``e`` serves part 0's pass ``e`` (in its own order), then part 1's, and so on;
parts carry the same fields. The kind follows the parts: all indexed — indexed, compiled
into the step; all of known length — a host source whose one-number position is a seek
(the state adds ``skipped``, ``skipped_by_part`` and ``part_skips`` for parts that skip
bad records); else a stream, resumed by reading the epoch again.

A record's stable index is its part's plus the
:func:`~datarax.core.lengths.stable_index_span` of the parts before it (their lengths,
for plain sources); where a part before the last has unbounded stable indices (a
mixture), it is ``s * num_parts + i`` so no two records of an epoch share one
(``stable_index_version`` 2); a stream concatenation's is the position in the pass. A
state of another concatenation is refused, naming the first differing
:meth:`ConcatSource.order_settings`.

Example:
    >>> import numpy as np
    >>> from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig
    >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
    >>> b = MemorySource(MemorySourceConfig(), {"x": np.arange(10, 12, dtype=np.int32)})
    >>> both = ConcatSource([a, b])
    >>> both.kind.value, len(both), [int(r["x"]) for r in both]
    ('indexed', 5, [0, 1, 2, 10, 11])
    >>> both.get_state()["settings"]["parts[1].num_records"]
    2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, concat_batches
from datarax.core.children import ChildSources, check_no_config, child_settings
from datarax.core.config import StructuralConfig, check_count, check_int
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import LengthIfKnown, stable_index_bound, stable_index_span
from datarax.core.errors import ConfigError, StateError
from datarax.core.module import HostState
from datarax.core.position import saved_counts, seeking_for_owner
from datarax.core.reading import ReadMode, compiles_whole, kind_for, read_at, reading_of
from datarax.core.spec import checked_spec
from datarax.core.stream import StreamPass
from datarax.host.counts import count_words
from datarax.sources.child_records import check_source_list
from datarax.sources.skip_ledger import SkipCounts
from datarax.typing import Batch

__all__ = ["ConcatSource", "ConcatSourceConfig"]


@dataclass(frozen=True)
class ConcatSourceConfig(StructuralConfig):
    """Configuration of :class:`ConcatSource`.

    Attributes:
        num_parts: how many sources are concatenated.
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
    """

    num_parts: int = 1
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_parts", minimum=1)


class _Reading(HostState):
    """Python-only bookkeeping of a stream concatenation's pass (never state)."""

    def __init__(self) -> None:
        self.epoch = 0  # the pass being read
        self.part = 0  # the part the pass is reading
        self.at = 0  # and the position in that part's pass


class ConcatSource(LengthIfKnown, ChildSources, SkipCounts, DataSourceModule):
    """Sources (``parts``: distinct, unsharded, one element spec) served one after
    another; see the module docstring. ``num_epochs``: passes direct iteration makes.

    Raises:
        SpecMismatchError: a part carries other fields, shapes or dtypes than part 0
            (the message names the part and the field).
        SourceContractError: a part that is not a source, is sharded, or is given twice.
        ConfigError: no parts, or every part is empty.
    """

    kind: ClassVar[SourceKind | None] = SourceKind.HOST

    def __init__(
        self,
        parts: Sequence[DataSourceModule],
        *extra: Any,
        num_epochs: int = 1,
        name: str | None = None,
    ) -> None:
        check_no_config("ConcatSource", (parts,), extra, takes="its parts (a list of sources)",
                        call="ConcatSource([a, b, ...], num_epochs=1)")
        check_source_list("ConcatSource", parts, "part", call="ConcatSource([a, b, ...]) (a "
                          "single source as ConcatSource([source]))", whole="the concatenation",
                          joined="concatenated", action="concatenating")
        super().__init__(ConcatSourceConfig(num_parts=len(parts), num_epochs=num_epochs), name=name)
        self.parts = nnx.List(list(parts))
        lengths = [p.epoch_size() for p in parts]
        self.__lengths: tuple[int | None, ...] = tuple(lengths)
        self.__reading = _Reading()
        self.__pass: StreamPass | None = None
        self.__part_counts = tuple(reading_of(p).counts_skips for p in parts)
        self.__counts_skips = False  # a host concatenation: it counts its parts' skips
        # part i's stable index s becomes s * scale + shifts[i] (static, not NNX state)
        self.__numbering: tuple[int, tuple[int, ...]] = (1, (0,) * len(parts))
        self.__span: int | None = None
        if any(n is None for n in lengths):
            self.__length: int | None = None
            self.__ends: tuple[int, ...] = ()
            self.__pass = StreamPass()
            self.kind = kind_for(ReadMode.CURSOR, forward_only=True)  # parts read in turn
            return
        self.__length = int(sum(lengths))  # type: ignore[arg-type]
        if self.__length == 0:
            raise ConfigError("ConcatSource: every part is empty; there is no record to serve.")
        self.__ends = tuple(int(e) for e in np.cumsum(lengths))  # static, not NNX state
        spans = [stable_index_span(p) for p in parts]
        before = [span for span in spans[:-1] if span is not None]
        if len(before) < len(parts) - 1:  # a part before the last unbounded: interleave
            self.__numbering = (len(parts), tuple(range(len(parts))))
        else:  # each part's indices past the spans of the parts before it
            self.__numbering = (1, tuple(int(v) for v in np.cumsum([0, *before])))
            self.__span = None if spans[-1] is None else int(sum(before) + spans[-1])
        if compiles_whole(parts):
            self.kind = kind_for(ReadMode.COMPILED)  # the whole concatenation compiles into the step
            return
        self.__counts_skips = True
        # Records the parts skipped as bad this epoch before the position, in all and
        # by part (a part's skip budget continues exactly after a rewind or restore).
        self._init_skips()
        self.skipped_by_part = nnx.Variable(np.zeros(len(parts), np.int64))

    # ------------------------------------------------------------ description
    def length_or_reason(self) -> int | str:
        if self.__length is None:
            unknown = [i for i, n in enumerate(self.__lengths) if n is None]
            return f"parts {unknown} do not know theirs"
        return self.__length

    def element_spec(self) -> dict[str, Any]:
        return dict(checked_spec(self.parts[0]))

    def stable_index_span(self) -> int | None:
        """The sum of the parts' spans (for parts of plain sources, its length); None
        where a part's is unbounded (a mixture) or the length unknown (a stream)."""
        return self.__span

    def stable_index_bound(self) -> int | None:
        """The largest of each part's bound as numbered here (None where one's is)."""
        scale, shifts = self.__numbering
        bounds = [stable_index_bound(p) for p in self.parts]
        if None in bounds:
            return None
        return max(b * scale + shift for b, shift in zip(bounds, shifts))

    def locate(self, index: int) -> tuple[int, int]:
        """``(part, position in that part's epoch)`` of epoch position ``index``
        (parts of known length)."""
        if self.__length is None:
            raise IndexError(f"ConcatSource position {index} has no place: a part's length "
                             "is not known (a stream)")
        if not 0 <= index < self.__length:
            raise IndexError(f"ConcatSource position {index} is outside its "
                             f"{count_words(self.__length, 'record')}")
        part = int(np.searchsorted(np.asarray(self.__ends), index, side="right"))
        return part, index - self._offset(part)

    def _offset(self, part: int) -> int:
        return self.__ends[part - 1] if part else 0

    def _numbered(self, part: int, indices: Any) -> Any:
        """The concatenation's stable indices of part ``part``'s ``indices`` (traceable)."""
        scale, shifts = self.__numbering
        return (indices if scale == 1 else indices * scale) + shifts[part]

    # ------------------------------------------------------- indexed (compiled)
    def _children(self) -> Any:
        return self.parts

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index of each record ``get_batch_at(start, size)`` serves (traceable)."""
        return self.get_batch_and_indices_at(start, size, key)[1]

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        return self.get_batch_and_indices_at(start, size, key)[0]

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """Records ``start .. start + size - 1`` (global positions: epoch ``e`` starts
        at ``e * len(self)``) of indexed parts, and their stable indices (traceable)."""
        jnp = jax.numpy
        n = len(self)
        positions = jnp.arange(size) + start
        epoch, within = positions // n, positions % n
        # the positions' dtype (int64 under x64): a user's strict dtype promotion refuses a mix
        ends = jnp.asarray(np.asarray(self.__ends), positions.dtype)
        owner = jnp.searchsorted(ends, within, side="right")
        offsets = jnp.concatenate([jnp.zeros(1, ends.dtype), ends[:-1]])
        # A part's records in any run of positions are consecutive in its own global
        # positions (its epochs follow each other): one read of `size` covers them.
        local = epoch * jnp.asarray(self.__lengths)[owner] + within - offsets[owner]
        out: Any = None
        stable: Any = None
        for i, part in enumerate(self.parts):
            if not self.__lengths[i]:
                continue
            mine = owner == i
            first = jnp.min(jnp.where(mine, local, jnp.iinfo(local.dtype).max))
            first = jnp.where(mine.any(), first, 0)
            batch, indices = part.get_batch_and_indices_at(first, size)
            rows = jnp.clip(local - first, 0, size - 1)
            picked = jax.tree.map(lambda v, r=rows: jnp.take(v, r, axis=0), batch)
            ids = self._numbered(i, jnp.take(jnp.asarray(indices), rows))
            if out is None:
                out, stable = picked, ids
                continue

            def choose(new: Any, old: Any, m: Any = mine) -> Any:
                return jnp.where(m.reshape((size,) + (1,) * (new.ndim - 1)), new, old)

            out = jax.tree.map(choose, picked, out)
            # parts may number in int32 and int64 (x64): the wider, explicitly (strict promotion)
            wide = max(ids.dtype, stable.dtype, key=lambda d: d.itemsize)
            stable = jnp.where(mine, ids.astype(wide), stable.astype(wide))
        return out, stable

    # ------------------------------------------------------------------ reads
    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """The next records (at most ``batch_size``) of this epoch and their stable
        indices; ``(None, None)`` at the epoch's end."""
        batch_size = check_count(batch_size, f"{type(self).__name__} batch_size", 1)
        if self.__pass is not None:
            return self.__pass.read(self, batch_size)
        size = self.epoch_size() or 0
        epoch, index = self.epoch, self.index
        if index >= size:
            return None, None
        n = len(self)
        lo = self.shard.bounds(n)[0]
        position, end = lo + index, lo + size
        batches, stables = [], []
        have = skipped = 0
        while have < batch_size and position < end:
            # a padded share's slots past the epoch's end (set_shard(padded=True)) read
            # the epoch's records again from its start: the Pipeline hands them out as
            # padding rows
            part, local = self.locate(position % n)
            room = min(end - position, self.__ends[part] - position % n)  # part's positions left
            batch, indices, passed = self._read_part(
                part, epoch, local, min(batch_size - have, room), room
            )
            got = 0 if batch is None else batch_length(batch)
            if got:
                batches.append(batch)
                stables.append(self._numbered(part, np.asarray(indices, np.int64)))
                have += got
            position += passed
            skipped += passed - got
            self._note_skips(part, passed - got)
        self.datarax_position.advance(position - lo - index)
        if not have:  # every record left in the epoch was bad (skipped)
            return None, None
        return concat_batches(batches), np.concatenate(stables)

    def _read_part(
        self, i: int, epoch: int, local: int, count: int, room: int
    ) -> tuple[Batch | None, np.ndarray | None, int]:
        """Up to ``count`` records of part ``i`` from position ``local`` of its pass
        ``epoch`` (:func:`~datarax.core.reading.read_at`, either mode), passing at most
        ``room`` positions: ``(batch, stable indices, positions passed)``. A part that
        skips bad records passes more positions than it hands out records; ``batch`` is
        None when all it passed were skipped."""
        part, n, who = self.parts[i], self.__lengths[i], self._part_name(i)
        # a part that counts its skips stands there with the count it had there
        skips = {"skipped": self._part_skips(i)} if self.__part_counts[i] else None
        batch, stable, end = read_at(part, epoch, local, count, n, who=who, skips=skips)
        if end - local <= room:
            return batch, stable, end - local
        # A part cut by a shard's end skipped past that end while filling the read:
        # read the positions again one record at a time, keeping those before the end.
        batches, stables, passed = [], [], 0
        while passed < room:
            batch, stable, end = read_at(part, epoch, local + passed, 1, n, who=who,
                                         skips=None if passed else skips)
            if end - local > room:  # the record found lies past the end
                break
            passed = end - local
            if batch is not None:
                batches.append(batch)
                stables.append(stable)
        if not batches:
            return None, None, room
        return concat_batches(batches), np.concatenate(stables), room

    def _part_name(self, i: int) -> str:
        """Part ``i`` as messages name it."""
        return f"ConcatSource part {i} ({type(self.parts[i]).__name__})"

    # ------------------------------------------------------- bad records (skips)
    def _skips(self) -> int:
        """Records skipped as bad this epoch before the position: counted by a host
        concatenation only (an indexed one's parts skip none; a stream's position
        counts the records handed out)."""
        return super()._skips() if self.__counts_skips else 0

    def _part_skips(self, i: int) -> int:
        """Records part ``i`` skipped this epoch before the position (part ``i`` holds
        it): the epoch's count less the parts' before it."""
        by_part = np.asarray(self.skipped_by_part.get_value())
        return max(self._skips() - int(by_part[:i].sum()), 0)

    def _note_skips(self, i: int, count: int) -> None:
        """``count`` more records of part ``i`` skipped; parts after it none yet."""
        if not self.__counts_skips:
            return  # an indexed concatenation read on the host: its parts never skip
        by_part = np.asarray(self.skipped_by_part.get_value()).copy()
        by_part[i] = self._part_skips(i) + count
        by_part[i + 1:] = 0
        self.skipped_by_part.set_value(by_part)
        self._set_skips(int(by_part.sum()))

    # ------------------------------------------------ a stream concatenation
    def restart(self, epoch: int) -> None:
        """Begin pass ``epoch`` from part 0 (every part at the start of its pass ``epoch``)."""
        for part in self.parts:
            part.seek(epoch, 0)
        self.__reading.epoch, self.__reading.part, self.__reading.at = epoch, 0, 0

    def get_batch(self, batch_size: int) -> Batch | None:
        """The pass's next records (at most ``batch_size``), parts in turn, or None at
        its end: the forward read a stream concatenation's pass is made of (use
        :meth:`get_batch_with_indices`, which counts what it hands out)."""
        reading = self.__reading
        while reading.part < len(self.parts):
            i, part = reading.part, self.parts[reading.part]
            batch, _, reading.at = read_at(part, reading.epoch, reading.at, batch_size,
                                           self.__lengths[i], who=self._part_name(i))
            if batch is not None:
                return batch
            reading.part, reading.at = reading.part + 1, 0
        return None

    def _moved(self) -> None:
        if self.__pass is not None:
            self.__pass.reposition()
        if self.index == 0 and self.__counts_skips:
            self._set_skips(0)
            self.skipped_by_part.set_value(np.zeros(len(self.parts), np.int64))

    # ------------------------------------------------------------------ state
    def order_settings(self) -> dict[str, Any]:
        """The number of parts, ``stable_index_version`` 2 where a part before the last
        has unbounded stable indices (see the module docstring), then each part's type,
        length and own settings under ``parts[i].``."""
        out: dict[str, Any] = {"num_parts": len(self.parts)}
        if self.__numbering[0] != 1:
            out["stable_index_version"] = 2
        for i, part in enumerate(self.parts):
            out.update(child_settings(f"parts[{i}].", part, self.__lengths[i]))
        return out

    def get_state(self) -> dict[str, Any]:
        """The position and the :meth:`order_settings` a restore must match; a host
        concatenation adds its :meth:`skip_state`."""
        state = super().get_state()
        if self.__counts_skips:
            state.update(self.skip_state())
        return state

    def skip_state(self) -> dict[str, Any]:
        """``skipped`` (records the parts skipped as bad this epoch before the position),
        ``skipped_by_part`` and, where the part at the position stands there and its own
        ``skip_state()`` says more than its total (a concatenation's), ``part_skips``:
        that part's, so its budgets continue exactly after a restore."""
        if not self.__counts_skips:  # indexed or a stream: its parts' positions count
            return super().skip_state()
        state: dict[str, Any] = {
            "skipped": self._skips(),
            "skipped_by_part": [int(v) for v in self.skipped_by_part.get_value()],
        }
        place = self._part_at_position()
        if place is not None:
            part, own = self.parts[place[0]], self.parts[place[0]].skip_state()
            if ((part.epoch, part.index) == (self.epoch, place[1]) and len(own) > 1
                    and own["skipped"] == self._part_skips(place[0])):
                state["part_skips"] = own
        return state

    def _part_at_position(self) -> tuple[int, int] | None:
        """``(part, its position)`` the next read starts at, where that part counts its
        skips; None otherwise (or at the epoch's end)."""
        if self.index >= (self.epoch_size() or 0):
            return None
        n = len(self)
        i, local = self.locate((self.shard.bounds(n)[0] + self.index) % n)
        return (i, local) if self.__part_counts[i] else None

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved concatenation handed out (a
        ``StateError`` names the first of :meth:`order_settings` that differs)."""
        self._check_numbering(state)
        if not self.__counts_skips:
            super().set_state(state)
            return
        epoch, index, skipped = self._checked_skips(
            state, where="ConcatSource", length=self.epoch_size()
        )
        state = {**state, "skipped": skipped}
        self._by_part(state)  # checked before the source moves
        self.seek(epoch, index)
        self.restore_skip_state(state)

    def restore_skip_state(self, state: Mapping[str, Any]) -> None:
        """Take back the counts :meth:`skip_state` gave (checked); without
        ``skipped_by_part`` (a state of an earlier version) part 0 skipped them all,
        without ``part_skips`` the part at the position gets its total only."""
        by_part = self._by_part(state)
        self._set_skips(state["skipped"])
        self.skipped_by_part.set_value(np.asarray(by_part, np.int64))
        if "part_skips" not in state:
            return
        part_skips, place = state["part_skips"], self._part_at_position()
        if place is None or not isinstance(part_skips, dict) or (
            part_skips.get("skipped") != by_part[place[0]]
        ):
            raise StateError(
                "ConcatSource state 'part_skips' must be the skip counts of the "
                "concatenation part at the position, its 'skipped' equal to that part's "
                f"entry of 'skipped_by_part' ({by_part!r}), got {part_skips!r}; pass the "
                "dict get_state() returned.",
                field="part_skips",
            )
        with seeking_for_owner():  # the part stands where this restored position says
            self.parts[place[0]].seek(self.epoch, place[1])
        self.parts[place[0]].restore_skip_state(part_skips)

    def _by_part(self, state: Mapping[str, Any]) -> list[int]:
        """The state's ``skipped_by_part``, checked against its ``skipped``."""
        skipped = state["skipped"]
        by_part = state.get("skipped_by_part", [skipped] + [0] * (len(self.parts) - 1))
        return saved_counts(by_part, "skipped_by_part", "ConcatSource", len(self.parts),
                            "records each part skipped", total=("skipped", skipped))

    def _check_numbering(self, state: Any) -> None:
        """Refuse a state saved under stable index version 1 where this concatenation
        numbers its records by version 2 (a part before the last has unbounded stable
        indices)."""
        saved = state.get("settings") if isinstance(state, dict) else None
        if self.__numbering[0] == 1 or not isinstance(saved, dict) or (
            "stable_index_version" in saved
        ):
            return
        raise StateError(
            "ConcatSource state was saved with stable index version 1, but this "
            "concatenation (a mixture or another part of unbounded stable indices before "
            "its last) numbers its records by version 2, stable * num_parts + part "
            "(version 1 gave two records of an epoch one per-record key). Restore it with "
            "the datarax release that saved it, or start the epoch again: seek(epoch, 0).",
            field="stable_index_version",
        )
