"""``InterleaveSource``: several sources read in turn, a block of records from each.

``cycle_length`` children are open at once, in slots, visited in turn, ``block_length``
consecutive records taken from each; when a child ends, the next child not yet opened
takes its slot when the pass comes back to it: ``tf.data.Dataset.interleave``'s
deterministic order. Pass ``e`` interleaves every child's pass ``e``. Children may be of
any and mixed kinds but carry the same fields; it is a stream-kind source on the host.

* **Stable index**: ``child_stable * num_children + child``.
* **Resume** is exact: the position plus ``cursor`` = ``[next child to open, slot,
  records of the block taken, then (child, its position) for each slot]`` (``-1``: an
  empty slot; ``slots = min(cycle_length, number of children)``). A child is stood at
  its position by :class:`~datarax.sources.child_records.ChildRecords` (a skipping child
  re-read from its pass's start, so its skip budget continues); a bare position is
  reached by reading the pass again.
* **Shards**: every process reads the whole pass and keeps record ``i`` of each whole
  round of ``P``.

Example:
    >>> import numpy as np
    >>> from datarax.sources import InterleaveSource, MemorySource, MemorySourceConfig
    >>> def numbers(lo, hi):
    ...     return MemorySource(MemorySourceConfig(), {"x": np.arange(lo, hi, dtype=np.int32)})
    >>> source = InterleaveSource([numbers(0, 3), numbers(10, 15), numbers(20, 22)],
    ...                           cycle_length=2, block_length=2)
    >>> batch, stable = source.get_batch_with_indices(10)
    >>> batch["x"].tolist()
    [0, 1, 10, 11, 2, 12, 13, 20, 21, 14]
    >>> source.get_state()["cursor"]
    [3, 1, 1, 2, 2, 1, 5]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flax import nnx

from datarax.core.batch import concat_batches
from datarax.core.children import (
    ChildSources,
    check_no_config,
    child_settings,
    restore_place,
    saved_place,
)
from datarax.core.config import StructuralConfig, check_int
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import LengthIfKnown, stable_index_bound
from datarax.core.errors import StateError
from datarax.core.module import HostState
from datarax.core.position import past_the_end
from datarax.core.spec import checked_spec
from datarax.sources.child_records import ChildRecords, ForwardReads, Stands, check_source_list
from datarax.sources.source_call import MISSING
from datarax.typing import Batch

__all__ = ["InterleaveSource", "InterleaveSourceConfig"]


@dataclass(frozen=True)
class InterleaveSourceConfig(StructuralConfig):
    """Configuration of :class:`InterleaveSource`.

    Attributes:
        num_children: how many sources are interleaved.
        cycle_length: children open at once (>= 1; more than ``num_children`` leaves
            slots empty, the same order as ``num_children``).
        block_length: consecutive records taken from a child before the next slot (>= 1).
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
    """

    num_children: int = 1
    cycle_length: int = 1
    block_length: int = 1
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_children", minimum=1)
        check_int(self, "cycle_length", minimum=1)
        check_int(self, "block_length", minimum=1)

    @property
    def slots(self) -> int:
        """The slots a pass uses: ``cycle_length``, at most one per child (a slot past the
        children would stay empty; the order is the same)."""
        return min(self.cycle_length, self.num_children)


class _Cycle(HostState):
    """Where one pass stands (never state: rebuilt from the cursor on every restore)."""

    def __init__(self, cycle_length: int) -> None:
        self.next_child = 0  # the next child to open
        self.slot = 0  # the slot being read
        self.taken = 0  # records of its block taken
        self.ids = [-1] * cycle_length  # the child in each slot (-1: none)
        self.reads: list[ChildRecords | None] = [None] * cycle_length

    def cursor(self) -> list[int]:
        out = [self.next_child, self.slot, self.taken]
        for child, reads in zip(self.ids, self.reads):
            out += [child, 0 if reads is None else reads.position]
        return out


class InterleaveSource(ForwardReads, LengthIfKnown, ChildSources, DataSourceModule):
    """Records of ``children`` (distinct, unsharded sources of one element spec) in
    turn, ``block_length`` from each of ``cycle_length`` open children; see the module
    docstring.

    Raises:
        ConfigError: no children, or ``cycle_length`` / ``block_length`` not an int >= 1.
        SourceContractError: a child that is not a source, is sharded or is given twice.
        SpecMismatchError: a child carries other fields, shapes or dtypes than child 0.
    """

    kind: ClassVar[SourceKind | None] = SourceKind.STREAM

    def __init__(
        self,
        children: Sequence[DataSourceModule],
        *extra: Any,
        cycle_length: int = MISSING,
        block_length: int = 1,
        num_epochs: int = 1,
        name: str | None = None,
    ) -> None:
        check_no_config("InterleaveSource", (children,), extra,
                        takes="its sources (a list)",
                        call="InterleaveSource([a, b, ...], cycle_length=k)",
                        left_out=["cycle_length"] if cycle_length is MISSING else [])
        check_source_list("InterleaveSource", children, "source",
                          call="InterleaveSource([a, b, ...], cycle_length=k)",
                          whole="the interleave", joined="interleaved", action="interleaving")
        config = InterleaveSourceConfig(num_children=len(children), cycle_length=cycle_length,
                                        block_length=block_length, num_epochs=num_epochs)
        super().__init__(config, name=name)
        self.children = nnx.List(list(children))
        self.__lengths = tuple(c.epoch_size() for c in children)
        # [epoch, index] the cursor belongs to, then _Cycle.cursor() there
        self.cursor = nnx.Variable(np.asarray([0, 0, *_Cycle(config.slots).cursor()], np.int64))
        self.__cycle = _Cycle(config.slots)
        self._stands = Stands()

    # ------------------------------------------------------------ description
    def length_or_reason(self) -> str:
        return ("it is read as a stream (its pass holds every record of every child's pass, "
                "once).")

    def stable_index_bound(self) -> int | None:
        """The children's largest bound times their number (None where one's is)."""
        bounds = [stable_index_bound(child) for child in self.children]
        return None if None in bounds else max(bounds) * self.config.num_children

    def element_spec(self) -> dict[str, Any]:
        return dict(checked_spec(self.children[0]))

    def _children(self) -> Any:
        return self.children

    # ------------------------------------------------------------------ reads
    def _outputs(self, count: int) -> tuple[Batch | None, np.ndarray]:
        """The pass's next ``count`` records (all shards; fewer only at its end)."""
        cycle, config = self.__cycle, self.config
        parts: list[Batch] = []
        stables: list[np.ndarray] = []
        have = 0
        while have < count:
            reads = cycle.reads[cycle.slot]
            if reads is None:
                if cycle.next_child < config.num_children:
                    self._open_slot(cycle.slot, cycle.next_child, 0)
                    cycle.next_child += 1
                    continue
                if all(r is None for r in cycle.reads):
                    break  # every child opened and ended: the pass is over
                self._next_slot()
                continue
            got = reads.take(min(count - have, config.block_length - cycle.taken))
            if got is None:  # the child ended: its slot is free
                cycle.reads[cycle.slot], cycle.ids[cycle.slot] = None, -1
                self._next_slot()
                continue
            child = cycle.ids[cycle.slot]
            parts.append(got[0])
            stables.append(got[1] * config.num_children + child)
            have += len(got[1])
            cycle.taken += len(got[1])
            if cycle.taken == config.block_length:
                self._next_slot()
        if not parts:
            return None, np.zeros(0, np.int64)
        return concat_batches(parts), np.concatenate(stables)

    def _next_slot(self) -> None:
        cycle = self.__cycle
        cycle.slot = (cycle.slot + 1) % self.config.slots
        cycle.taken = 0

    def _open_slot(self, slot: int, child: int, position: int) -> None:
        cycle = self.__cycle
        cycle.ids[slot] = child
        source = self.children[child]
        cycle.reads[slot] = ChildRecords(source, self.datarax_position.epoch, position,
                                         who=f"InterleaveSource source {child} "
                                             f"({type(source).__name__})")

    def _where(self) -> tuple[int, ...]:
        return (*self.datarax_position.where(), *(int(v) for v in self.cursor.get_value()[2:]))

    def _stood(self) -> None:
        value = [*self.datarax_position.where(), *self.__cycle.cursor()]
        self.cursor.set_value(np.asarray(value, np.int64))
        super()._stood()

    def _open(self) -> None:
        """Stand the pass where the position and the cursor say."""
        epoch, index = self.datarax_position.where()
        saved = [int(v) for v in np.asarray(self.cursor.get_value())]
        self.__cycle = cycle = _Cycle(self.config.slots)
        if saved[:2] == [epoch, index]:
            cycle.next_child, cycle.slot, cycle.taken = saved[2:5]
            for slot in range(self.config.slots):
                child, position = saved[5 + 2 * slot: 7 + 2 * slot]
                if child >= 0:
                    self._open_slot(slot, child, position)
        elif index:  # a bare position (seek(epoch, index)): read the pass up to it
            left = index * self.shard.count
            while left:
                passed = len(self._outputs(min(left, 1024))[1])
                if not passed:
                    break
                left -= passed
            if left:
                raise past_the_end("InterleaveSource", epoch, index)
        self._stood()

    # ------------------------------------------------------------------ state
    def order_settings(self) -> dict[str, Any]:
        """``cycle_length``, ``block_length``, the number of children, then each child's
        type, length and own settings under ``children[i].``."""
        out: dict[str, Any] = {
            "cycle_length": self.config.cycle_length,
            "block_length": self.config.block_length,
            "num_children": self.config.num_children,
        }
        for i, child in enumerate(self.children):
            out.update(child_settings(f"children[{i}].", child, self.__lengths[i]))
        return out

    def get_state(self) -> dict[str, Any]:
        """The position, ``cursor`` (see the module docstring) and the
        :meth:`order_settings` a restore must match."""
        state = super().get_state()
        state["cursor"] = saved_place(self)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out (a
        ``StateError`` names the first of :meth:`order_settings` that differs)."""
        super().set_state(state)
        cursor = state.get("cursor")
        if cursor is None:
            return  # a bare position: reached by reading the pass
        check_cursor(cursor, self.config)
        restore_place(self, cursor)


def check_cursor(cursor: Any, config: InterleaveSourceConfig) -> None:
    """Refuse a ``cursor`` that is not one an interleave of ``config`` saves."""
    k, c = config.num_children, config.slots
    ints = isinstance(cursor, (list, tuple)) and all(
        not isinstance(v, bool) and isinstance(v, (int, np.integer)) for v in cursor)
    ok = ints and len(cursor) == 3 + 2 * c
    if ok:
        next_child, slot, taken = cursor[:3]
        pairs = [cursor[3 + 2 * s: 5 + 2 * s] for s in range(c)]
        opened = [child for child, _ in pairs if child >= 0]
        ok = (0 <= next_child <= k and 0 <= slot < c and 0 <= taken < config.block_length
              and all(-1 <= child < next_child and position >= 0 for child, position in pairs)
              and len(set(opened)) == len(opened))
    if not ok:
        raise StateError(
            f"InterleaveSource state 'cursor' must be [next child, slot, block records "
            f"taken, then (child, position) for each of the {c} slots], as get_state() "
            f"returns it for {k} children; got {cursor!r}.",
            field="cursor",
        )
