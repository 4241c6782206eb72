"""``FlatMapSource``: each record of a source turned into 0 .. k records.

``fn(record)`` receives one parent record (a dict of numpy values; text as ``str``) and
returns a list of records of the same fields, shapes and dtypes each time (several
crops, the windows of a long sequence, nothing to drop it); they are served in order.
It is a stream-kind source on the host (an epoch's length is unknown until read); for a
fixed fan-out on the compiled path, compute the ``k`` outputs in one operator instead.

* **Resume** is exact with O(1) state: the position plus ``cursor`` = ``[parent
  position, output offset]``; a restore re-reads that parent record. ``fn`` must be a
  function of the record alone (add randomness in a later stage). Over a parent that
  skips bad records the cursor names where the read began, and ``parent_skipped`` /
  ``parent_skips`` the parent's skip counts there.
* **Per-record keys** come from the stable index ``parent_stable * max_outputs +
  offset``, the same at any batch size and after any resume
  (:func:`~datarax.core.lengths.wide_stable_indices` past ``2**32``).
* **Shards**: every process reads the whole parent and keeps record ``i`` of each whole
  round of ``P`` outputs.
* **Checks**: an output unlike the first, more than ``max_outputs`` outputs, or anything
  but a list of dicts is refused naming the record.

Example:
    >>> import numpy as np
    >>> from datarax.sources import FlatMapSource, MemorySource, MemorySourceConfig
    >>> parent = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    >>> def repeat(record):  # record x gives x copies of itself
    ...     return [{"x": record["x"], "copy": np.int32(c)} for c in range(int(record["x"]))]
    >>> source = FlatMapSource(parent, repeat, max_outputs=3)
    >>> batch, stable = source.get_batch_with_indices(4)
    >>> batch["x"].tolist(), batch["copy"].tolist(), stable.tolist()
    ([1, 2, 2, 3], [0, 0, 1, 0], [3, 6, 7, 9])
    >>> source.get_state()["cursor"]
    [3, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, record_at, stack_records
from datarax.core.children import (
    ChildSources,
    check_child,
    check_no_config,
    child_settings,
    restore_place,
    saved_place,
    stream_without_restart,
)
from datarax.core.config import StructuralConfig, check_bool, check_int
from datarax.core.data_source import DataSourceModule, SourceKind, skipping_setting
from datarax.core.lengths import LengthIfKnown, stable_index_bound
from datarax.core.errors import ConfigError, DataraxError, StateError
from datarax.core.module import HostState
from datarax.core.position import past_the_end, saved_count, saved_counts
from datarax.core.stage_digest import describe, digest
from datarax.core.reading import compiled, read_at, reading_of
from datarax.host.counts import count_words
from datarax.sources.child_records import CHUNK, ForwardReads, Stands
from datarax.sources.flat_map_outputs import check_tree, fit_tree, spec_tree
from datarax.sources.source_call import MISSING
from datarax.typing import Batch

__all__ = ["FlatMapSource", "FlatMapSourceConfig"]


@dataclass(frozen=True)
class FlatMapSourceConfig(StructuralConfig):
    """Configuration of :class:`FlatMapSource`.

    Attributes:
        max_outputs: the most records ``fn`` returns for one record (>= 1); stable
            indices are ``parent_stable * max_outputs + offset``.
        fn_name: the qualified name of ``fn``, for messages.
        fn_source: a digest of ``fn`` as a pipeline's state sees its stages' functions
            (:mod:`datarax.core.stage_digest`: its source and plain closure values), so a
            restore into another function, even of the same name, is refused.
        cast_float64: cast ``float64`` output fields to ``float32`` while
            ``jax_enable_x64`` is off (without it they are refused).
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
    """

    max_outputs: int = 1
    fn_name: str = ""
    fn_source: str = ""
    cast_float64: bool = False
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "max_outputs", minimum=1)
        check_bool(self, "cast_float64")


class _Reading(HostState):
    """The pass being read in this process (never state: derived from the position
    and the cursor on every restore)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.chunk: Batch | None = None  # parent records read, not yet expanded
        self.chunk_stable: np.ndarray = np.zeros(0, np.int64)
        self.chunk_start = 0  # the parent position the chunk was read from
        self.chunk_next = 0  # the parent's position after it (past records it skipped)
        # the parent's skip_state() at both ({"skipped": 0}: a parent that counts none)
        self.chunk_counts: dict[str, Any] = {"skipped": 0}
        self.next_counts: dict[str, Any] = {"skipped": 0}
        self.parent_done = False  # the parent's pass ended after the chunk
        self.reopen = True  # the next parent read moves the parent there, wherever it stands
        self.row = 0  # the chunk's record whose outputs are pending
        self.before = 0  # outputs of the chunk's records before it
        self.loaded = False  # whether `outputs` holds that record's outputs yet
        self.outputs: list[Any] = []  # that record's outputs
        self.stable = 0  # its stable index
        self.offset = 0  # outputs of it already passed
        self.spec: dict[str, Any] | None = None
        self.spec_from = ""  # where the spec was learned


class FlatMapSource(ForwardReads, LengthIfKnown, ChildSources, DataSourceModule):
    """Records of ``source`` (any kind, unsharded) each turned into 0 .. ``max_outputs``
    records by ``fn``; see the module docstring and :class:`FlatMapSourceConfig`."""

    kind: ClassVar[SourceKind | None] = SourceKind.STREAM

    def __init__(
        self,
        source: DataSourceModule,
        fn: Callable[[Any], Sequence[Mapping[str, Any]]],
        *extra: Any,
        max_outputs: int = MISSING,
        cast_float64: bool = False,
        num_epochs: int = 1,
        name: str | None = None,
    ) -> None:
        check_no_config("FlatMapSource", (source, fn), extra, takes="the source and fn",
                        call="FlatMapSource(source, fn, max_outputs=...)",
                        left_out=["max_outputs"] if max_outputs is MISSING else [])
        check_child("FlatMapSource", "source", source, whole="the flat-mapped source",
                    children="parent")
        if not callable(fn):
            raise DataraxError(f"FlatMapSource fn must be callable, got {type(fn).__name__}.")
        if (stream := stream_without_restart(source)) is not None:
            raise ConfigError(
                f"FlatMapSource parent {stream} is a stream without restart(self, epoch), so "
                "it cannot be read twice: FlatMapSource reads the parent's first records to "
                "learn what fn returns (its element spec), then reads the pass from its first "
                f"record. Implement restart(self, epoch) in {stream} to start its pass over."
            )
        config = FlatMapSourceConfig(
            max_outputs=max_outputs,
            fn_name=getattr(fn, "__qualname__", type(fn).__qualname__),
            fn_source=digest(describe(fn)),
            cast_float64=cast_float64,
            num_epochs=num_epochs,
        )
        super().__init__(config, name=name)
        self.source = source
        self.fn = nnx.static(fn)
        self.__length = source.epoch_size()
        self.__skipping = skipping_setting(source) is not None
        self.__counts_skips = not compiled(source) and reading_of(source).counts_skips
        # [epoch, index] the cursor belongs to, then the place of the next output (the
        # start of the next round of shards): [parent position, outputs passed from
        # there on, records the parent skipped as bad before it].
        self.cursor = nnx.Variable(np.zeros(5, np.int64))
        self.__reading = _Reading()
        self._stands = Stands()
        # the cursor's place and the parent's skip_state() there
        self.__counts_at: tuple[tuple[int, ...], dict[str, Any] | None] = ((), None)

    # ------------------------------------------------------------ description
    def length_or_reason(self) -> str:
        return ("fn returns 0 .. max_outputs records for each parent record, so an epoch's "
                "length is known only once it is read.")

    def stable_index_bound(self) -> int | None:
        """The parent's bound times ``max_outputs`` (None where the parent's is)."""
        parent = stable_index_bound(self.source)
        return None if parent is None else parent * self.config.max_outputs

    def _children(self) -> Any:
        return (self.source,)

    def element_spec(self) -> dict[str, Any]:
        """The first output's fields (the parent's pass 0 read until ``fn`` returns one)."""
        reading = self.__reading
        if reading.spec is None:
            self._learn_spec()
        assert reading.spec is not None
        return dict(reading.spec)

    def _learn_spec(self) -> None:
        reading = self.__reading
        position = seen = 0
        while True:
            chunk, stable, after, done = self._read_parent(0, position, reopen=not position)
            count = 0 if chunk is None else batch_length(chunk)
            seen += count
            for row in range(count):
                outputs = self._expand(record_at(chunk, row), int(stable[row]), 0,
                                       f"position {position + row}")
                if outputs:
                    reading.spec = spec_tree(outputs[0])
                    reading.spec_from = f"the first output of parent record {int(stable[row])}"
                    self._moved()  # the parent was read: the next read reopens
                    return
            position = after
            if done:
                raise DataraxError(
                    "FlatMapSource: fn returned no record for any record of the parent's "
                    "first pass, so there is nothing to serve (and no element spec)."
                    if seen else
                    f"FlatMapSource: the parent ({type(self.source).__name__}) holds no record "
                    "in its first pass, so there is nothing to serve (and no element spec)."
                )

    # ------------------------------------------------------------------ reads
    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """This shard's next records (at most ``batch_size``) and their stable
        indices; ``(None, None)`` at the pass's end."""
        self.element_spec()  # learned first: learning it reads the parent (then reopened)
        return super().get_batch_with_indices(batch_size)

    def _read(self, batch_size: int) -> tuple[Batch, np.ndarray] | None:
        kept, stables = self._read_rounds(batch_size, self.element_spec())
        return (stack_records(kept), np.asarray(stables, np.int64)) if kept else None

    def _read_rounds(self, batch_size: int, spec: dict[str, Any]) -> tuple[list[Any], list[int]]:
        """This shard's record of each of up to ``batch_size`` whole rounds, checked."""
        index, count = self.shard.index, self.shard.count
        kept: list[Any] = []
        stables: list[int] = []
        while len(kept) < batch_size:
            round_ = []
            for _ in range(count):
                item = self._next_output()
                if item is None:
                    break
                round_.append(item)
            if len(round_) < count:  # the pass ended (a partial round is left out)
                break
            record, stable = round_[index]
            check_tree(record, spec, self._where_record(stable), self.__reading.spec_from)
            kept.append(record)
            stables.append(stable)
        return kept, stables

    def _where(self) -> tuple[int, ...]:
        cursor = [int(v) for v in np.asarray(self.cursor.get_value())]
        return (*self.datarax_position.where(), *cursor[2:])

    def _stood(self) -> None:
        place = (*self.datarax_position.where(), *self._place())
        self.cursor.set_value(np.asarray(place, np.int64))
        reading = self.__reading
        done = reading.row >= len(reading.chunk_stable)  # the place is the chunk's next
        self.__counts_at = (place, reading.next_counts if done else reading.chunk_counts)
        super()._stood()

    def _place(self) -> tuple[int, int, int]:
        """Where the next output stands: ``(parent position, outputs passed from there
        on, the parent's skip count there)``. A chunk the parent skipped records in does
        not say which positions its records had: the place is then the chunk's start."""
        reading = self.__reading
        got = len(reading.chunk_stable)
        if reading.row >= got:  # the chunk is done (or none is read yet)
            return reading.chunk_next, reading.offset, reading.next_counts["skipped"]
        skips = reading.chunk_counts["skipped"]
        if reading.chunk_next - reading.chunk_start == got:  # every position a record
            return reading.chunk_start + reading.row, reading.offset, skips
        return reading.chunk_start, reading.before + reading.offset, skips

    def _open(self) -> None:
        """Start reading where the position and the cursor say."""
        reading = self.__reading
        epoch, index = self.datarax_position.where()
        cursor = [int(v) for v in np.asarray(self.cursor.get_value())]
        reading.epoch = epoch
        # a cursor of another length (an earlier release's nnx state) names no place here
        described = len(cursor) == 5 and cursor[:2] == [epoch, index]
        parent_pos, offset, skips = cursor[2:] if described else (0, 0, 0)
        reading.chunk, reading.chunk_stable, reading.parent_done = None, np.zeros(0, np.int64), False
        reading.chunk_start = reading.chunk_next = parent_pos
        place, counts = self.__counts_at  # a restored state's (or the last saved) counts
        if counts is None or not (described and place == (epoch, index, *cursor[2:])):
            counts = {"skipped": skips}  # the total only
        reading.chunk_counts = reading.next_counts = counts
        reading.row = reading.before = reading.offset = 0
        reading.outputs, reading.loaded = [], False
        reading.reopen = True  # its position (nnx.update sets it) says nothing of its reader
        if not described and index:  # moved by seek(epoch, index) alone: read up to there
            for _ in range(index * self.shard.count):
                if self._next_output() is None:
                    raise past_the_end("FlatMapSource", epoch, index, "another source or fn")
        elif offset and self.__skipping:  # outputs from there on, over records
            for _ in range(offset):
                if self._next_output() is None:
                    raise past_the_end("FlatMapSource", epoch, offset, "another source or fn",
                                       unit=f"outputs from parent position {parent_pos}",
                                       done="passed", field="cursor")
        elif offset:
            self._load_outputs()
            if offset > len(reading.outputs):
                raise StateError(
                    f"FlatMapSource state cursor says output {offset} of parent record at "
                    f"position {parent_pos} of pass {epoch}, but fn returns "
                    f"{count_words(len(reading.outputs), 'record')} for it; the state comes from "
                    "another "
                    "source or fn.",
                    field="cursor",
                )
            reading.offset = offset
        self._stood()

    def _load_outputs(self) -> bool:
        """Expand the pending parent record; False at the pass's end."""
        reading = self.__reading
        if reading.row >= len(reading.chunk_stable):
            if reading.parent_done:
                return False
            start, reading.chunk_counts = reading.chunk_next, reading.next_counts
            # the parent stands there with its skip state there: each budget goes on
            chunk, stable, after, done = self._read_parent(
                reading.epoch, start, reading.chunk_counts if self.__counts_skips else None,
                reopen=reading.reopen)
            reading.reopen = False
            reading.parent_done = done
            reading.chunk, reading.chunk_stable = chunk, stable
            reading.chunk_start, reading.chunk_next = start, after
            reading.next_counts = (self.source.skip_state() if self.__counts_skips
                                   else {"skipped": 0})
            reading.row = reading.before = 0
            if chunk is None:
                return False
        row, start = reading.row, reading.chunk_start
        stable = int(reading.chunk_stable[row])
        exact = reading.chunk_next - start == len(reading.chunk_stable)
        place = f"position {start + row}" if exact else f"read on from position {start}"
        reading.outputs = self._expand(record_at(reading.chunk, row), stable, reading.epoch, place)
        reading.stable = stable
        reading.loaded = True
        return True

    def _next_output(self) -> tuple[Any, int] | None:
        """The pass's next output (all shards) and its stable index, or None."""
        reading = self.__reading
        while True:
            if not reading.loaded:
                if not self._load_outputs():
                    return None
            if reading.offset < len(reading.outputs):
                record = reading.outputs[reading.offset]
                stable = reading.stable * self.config.max_outputs + reading.offset
                reading.offset += 1
                return record, stable
            reading.row += 1
            reading.before += len(reading.outputs)
            reading.outputs, reading.offset, reading.loaded = [], 0, False

    def _read_parent(self, epoch: int, position: int, skips: dict[str, Any] | None = None, *,
                     reopen: bool = False) -> tuple[Batch | None, np.ndarray, int, bool]:
        """Parent records from ``position`` of its pass ``epoch`` (``skips``: the parent's
        ``skip_state()`` there; ``reopen``: the first read since the parent was stood there):
        ``(records, stable indices, the parent's position after them, whether the pass
        ends there)``. A parent that skips bad records moves past more positions than it
        hands out."""
        n = self.__length
        batch, stable, after = read_at(self.source, epoch, position, CHUNK, n, skips=skips,
                                       reopen=reopen,
                                       who=f"FlatMapSource parent ({type(self.source).__name__})")
        return batch, stable, after, batch is None or (n is not None and after >= n)

    def _expand(self, record: Any, stable: int, epoch: int, place: str) -> list[Any]:
        """``fn(record)`` checked: a list of at most ``max_outputs`` dicts."""
        where = f"parent record {stable} ({place} of pass {epoch})"
        try:
            outputs = self.fn(record)
        except Exception as err:  # noqa: BLE001 - re-raised naming the record
            raise DataraxError(
                f"FlatMapSource: fn raised {type(err).__name__} on {where}: {err}"
            ) from err
        if isinstance(outputs, Mapping) or isinstance(outputs, (str, bytes)) or outputs is None:
            raise DataraxError(
                f"FlatMapSource: fn returned {type(outputs).__name__} for {where}; return a "
                "list of records (dicts), [] for none."
            )
        outputs = list(outputs)
        if len(outputs) > self.config.max_outputs:
            raise DataraxError(
                f"FlatMapSource: fn returned {count_words(len(outputs), 'record')} for {where}, "
                "more than "
                f"max_outputs={self.config.max_outputs}; raise max_outputs."
            )
        fitted = []
        for k, output in enumerate(outputs):
            if not isinstance(output, Mapping) or not output:
                raise DataraxError(
                    f"FlatMapSource: output {k} of {where} is {type(output).__name__}; each "
                    "output must be a non-empty dict of fields."
                )
            fitted.append(fit_tree(output, self.config.cast_float64, f"output {k} of {where}"))
        return fitted

    def _where_record(self, stable: int) -> str:
        parent, offset = divmod(stable, self.config.max_outputs)
        return f"output {offset} of parent record {parent}"

    # ------------------------------------------------------------------ state
    def seek(self, epoch: int, index: int = 0) -> None:
        """Stand at output ``index`` of pass ``epoch`` (a position the cursor does not
        describe is reached by reading the pass up to it)."""
        super().seek(epoch, index)
        cursor = [int(v) for v in np.asarray(self.cursor.get_value())]
        if cursor[:2] != [epoch, index] and index == 0:
            self.cursor.set_value(np.asarray([epoch, 0, 0, 0, 0], np.int64))

    def order_settings(self) -> dict[str, Any]:
        """``max_outputs``, ``fn``'s name and source digest, then the parent's type,
        length and settings under ``parent.``."""
        out: dict[str, Any] = {
            "max_outputs": self.config.max_outputs,
            "fn_name": self.config.fn_name,
            "fn_source": self.config.fn_source,
        }
        out.update(child_settings("parent.", self.source, self.__length))
        return out

    def _same_fn(self, state: Any) -> Any:
        """``state``, refused when saved over another ``fn`` of the same name; one saved
        before states named ``fn_source`` (the name only) is taken as of this ``fn``."""
        saved = state.get("settings") if isinstance(state, dict) else None
        if not isinstance(saved, dict) or saved.get("fn_name") != self.config.fn_name:
            return state  # the settings check names what differs
        if "fn_source" not in saved:
            return {**state, "settings": {**saved, "fn_source": self.config.fn_source}}
        if saved["fn_source"] != self.config.fn_source:
            raise StateError(
                f"FlatMapSource state was saved over another fn: both are named "
                f"{self.config.fn_name!r}, but their source (or closure values) differ "
                f"(digest {saved['fn_source']!r} saved, {self.config.fn_source!r} here); "
                "restore it into a flat map of the function that saved it.",
                field="fn_source",
            )
        return state

    def get_state(self) -> dict[str, Any]:
        """The position, ``cursor`` = ``[parent position, output offset]`` of the next
        output, and the :meth:`order_settings` a restore must match. Over a parent that
        skips bad records, the offset counts outputs from that parent position on (the
        positions of records read together are not known), and ``parent_skipped`` holds
        the records the parent skipped before it (so its skip budget continues)."""
        state = super().get_state()
        place = saved_place(self)
        place = place if place is not None and len(place) == 3 else None  # see _open
        state["cursor"] = None if place is None else place[:2]
        if self.__skipping and place is not None:
            state["parent_skipped"] = place[2]
            at, counts = self.__counts_at  # where it says more than the total
            if counts and len(counts) > 1 and list(at) == [self.epoch, self.index, *place]:
                state["parent_skips"] = counts
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out (a
        ``StateError`` names the first of :meth:`order_settings` that differs; a state of
        another ``fn``, even one of the same name, is refused saying so)."""
        super().set_state(self._same_fn(state))
        cursor = state.get("cursor")
        if cursor is None:
            return  # a bare position: reached by reading the pass
        cursor = saved_counts(cursor, "cursor", "FlatMapSource", 2,
                              "parent position, output offset")
        skips = saved_count(state, "parent_skipped", "FlatMapSource", default=0,
                            at_most=cursor[0],
                            meaning=f"records the parent skipped before position {cursor[0]}")
        counts = state.get("parent_skips")  # absent (an earlier version's): the total only
        if counts is not None and not (
            self.__counts_skips and isinstance(counts, dict) and counts.get("skipped") == skips
        ):
            raise StateError(
                "FlatMapSource state 'parent_skips' must be the parent concatenation's skip "
                f"counts, its 'skipped' equal to 'parent_skipped' ({skips}), got {counts!r}; "
                "pass the dict get_state() returned.",
                field="parent_skips",
            )
        restore_place(self, [*cursor, skips])
        self.__counts_at = ((self.epoch, self.index, *cursor, skips), counts)
