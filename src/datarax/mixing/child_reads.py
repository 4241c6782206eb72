"""A mixture's reads on the host: the records one child serves for a run of its draws.

A child of known length is read at the run's positions; a child read by passes (a stream,
or a source that skips bad records: its records per pass are known only once read) reads
on from where it stands, its pass boundaries in the mixture's ``stream_passes``; moved
back, it reads its pass again, so its skip counts continue exactly. What
:class:`ChildReads` keeps between reads is bookkeeping, never state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.batch import concat_batches, take_records
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import SourceContractError
from datarax.core.module import HostState
from datarax.core.reading import forward_only, read_at, reading_of, skips_in_position
from datarax.core.spec import TextSpec
from datarax.core.stream import CannotGoBack
from datarax.core.step_cache import cached, split_for_step
from datarax.host.counts import count_words
from datarax.mixing.sampling import SampledOrder, sampled_records
from datarax.typing import Batch


class ChildReads(HostState):
    """The host reads of one mixture's children (see the module docstring)."""

    def __init__(self, names: Sequence[str], children: Sequence[DataSourceModule],
                 seed: int) -> None:
        self.names = tuple(names)
        self.lengths = tuple(c.epoch_size() for c in children)  # None: a stream
        self.readings = tuple(reading_of(c) for c in children)
        # read by passes: a stream, or a child whose position counts records it skipped
        self.by_pass = tuple(forward_only(c) or skips_in_position(c) for c in children)
        self.seed = seed
        self.next_draw: list[int | None] = [None] * len(names)  # where each stream stands
        # and its position in its pass there (skipped records counted)
        self.stands_at = [0] * len(names)
        self.sampled_orders: dict[int, SampledOrder] = {}
        self.sampled_next: dict[int, int] = {}  # next draw each host child's reader is at

    def forget_streams(self) -> None:
        """The streams were moved from outside (a restore): read each from its pass again."""
        self.next_draw = [None] * len(self.names)

    def read(self, i: int, child: DataSourceModule, mode: str, draws: np.ndarray,
             stream_passes: nnx.Variable[Any]) -> Batch:
        """Child ``i``'s records for its consecutive ``draws`` (host arrays, text as lists)."""
        first, count = int(draws[0]), len(draws)
        if mode == "sampling":
            return self._sampled(i, child, draws)
        if self.by_pass[i]:
            return self._stream(i, child, first, count, stream_passes)
        n, parts, have = self.lengths[i], [], 0
        while have < count:  # either mode: read_at moves a child only where it stands elsewhere
            epoch, index = divmod(first + have, n)
            batch, stable, _ = read_at(child, epoch, index, min(count - have, n - index), n,
                                       who=self._who(i, child))
            if batch is None:  # pragma: no cover - a child that moved itself to its next pass
                raise SourceContractError(
                    f"{type(child).__name__} ended its epoch at {child.index} of "
                    f"{count_words(n, 'record')}."
                )
            parts.append(batch)
            have += len(stable)
        return concat_batches(parts)

    def _stream(self, i: int, child: DataSourceModule, first: int, count: int,
                stream_passes: nnx.Variable[Any]) -> Batch:
        passes = stream_passes.get_value()
        epoch, start = int(passes[i, 0]), int(passes[i, 1])  # the pass, its first draw
        draw, at = first, self.stands_at[i]  # the draw the child stands at, its position
        moved = self.next_draw[i] != first
        if moved:
            if first < start:  # moved back from outside (a parent's seek or restore
                epoch, start = 0, 0  # keeps no stream_passes): read again from pass 0 on
                self._set_pass(i, stream_passes, epoch, start)
            # from the pass's start: draw ``first`` may lie in a later pass, whose start is
            # known only once the passes before it are read
            child.seek(epoch, 0)
            draw, at = start, 0
        parts = []
        while draw < first + count:  # records before ``first`` read and dropped
            want = first + count - draw if draw >= first else min(first - draw, max(count, 1024))
            try:
                batch, stable, at = read_at(child, epoch, at, want, None, who=self._who(i, child))
            except CannotGoBack as err:
                if not moved:
                    raise
                raise CannotGoBack(self._cannot_go_back(i, child, first, epoch, err.stream),
                                   stream=err.stream) from err
            if batch is None:
                if draw == start:
                    raise SourceContractError(
                        f"MixSource: stream '{self.names[i]}' served no record in pass "
                        f"{epoch}; a mixed stream must serve records in every pass."
                    )
                epoch, start, at = epoch + 1, draw, 0
                self._set_pass(i, stream_passes, epoch, start)
                continue
            if draw >= first:
                parts.append(batch)
            draw += len(stable)
        self.next_draw[i], self.stands_at[i] = first + count, at
        return concat_batches(parts)

    def _cannot_go_back(self, i: int, child: DataSourceModule, first: int, epoch: int,
                        name: str) -> str:
        """Why child ``i``, moved back to its pass's start to reach draw ``first``, was
        refused by stream ``name`` (it cannot restart), and what to do."""
        return (
            f"{self._who(i, child)} cannot serve its draw {first}: the stream does not "
            "stand at that draw, so the mixture reads it again from the start of its pass "
            f"{epoch}, but {name} already read into that pass and does not implement "
            "restart(self, epoch), so it cannot go back. That happens on a new "
            "mixture pass after a `break`, take() or skip(), on a restore or seek, and on a "
            f"batch read again after it failed. Implement restart(self, epoch) in {name} "
            "(reopen the file, re-create the generator); or continue the pass: keep its "
            "iterator (it = iter(pipeline)) and loop over it again after a break (a refused "
            "loop ends the old one), or build the mixture again over new streams and "
            "set_state a state saved in this pass (pipeline.get_state() still holds where "
            "it stands)."
        )

    def _who(self, i: int, child: DataSourceModule) -> str:
        """Child ``i`` as messages name it."""
        return f"MixSource source '{self.names[i]}' ({type(child).__name__})"

    @staticmethod
    def _set_pass(i: int, stream_passes: nnx.Variable[Any], epoch: int, start: int) -> None:
        """Stream ``i`` is in its pass ``epoch``, which began at its draw ``start``."""
        updated = np.array(stream_passes.get_value())
        updated[i] = (epoch, start)
        stream_passes.set_value(updated)

    def _sampled(self, i: int, child: DataSourceModule, draws: np.ndarray) -> Batch:
        records = sampled_records(self.seed, i, draws, self.lengths[i])
        if self.readings[i].compiled:
            # padded to a power of two: reads reuse the same traced shapes
            padded = np.resize(np.asarray(records, np.int32), 1 << max(len(records) - 1, 0).bit_length())
            graphdef, state = split_for_step(child)
            batch = sampled_read(graphdef)(state, child.step_inputs(), jax.numpy.asarray(padded))
            out = {k: np.asarray(v)[: len(records), 0] for k, v in batch.items()}
            if child.has_host_fields():  # text: read on the host, record by record
                host = [child.with_host_fields({}, int(r), 1)[0] for r in records.tolist()]
                for key in host[0].keys() - out.keys():
                    out[key] = [part[key][0] for part in host]
            return out
        if not self.readings[i].reads_in_order:  # built from others (a concatenation ...)
            return read_positions(child, records, self.lengths[i])
        first = int(draws[0])
        order = self.sampled_orders.get(i)
        if order is None:
            order = self.sampled_orders[i] = SampledOrder(self.seed, i, self.lengths[i])
        batch = child.read_in_order(order, first, len(draws),
                                    resume=self.sampled_next.get(i) == first)
        self.sampled_next[i] = first + len(draws)
        return batch


def read_positions(child: DataSourceModule, positions: np.ndarray, length: int | None) -> Batch:
    """The records at ``positions`` of ``child``'s pass 0, in that order: each record read
    once, each run of adjacent positions in one forward read.

    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> child = MemorySource(MemorySourceConfig(), {"x": np.arange(10, 20)})
    >>> read_positions(child, np.array([4, 2, 3, 4, 9]), 10)["x"].tolist()
    [14, 12, 13, 14, 19]
    """
    wanted = np.unique(positions)
    parts = []
    for run in np.split(wanted, np.flatnonzero(np.diff(wanted) > 1) + 1):
        at, stop = int(run[0]), int(run[-1]) + 1
        while at < stop:  # a cursor-mode child may hand out fewer than asked
            batch, _, at = read_at(child, 0, at, stop - at, length)
            parts.append(batch)
    return take_records(concat_batches(parts), np.searchsorted(wanted, positions))


def sampled_read(graphdef: Any) -> Any:
    """Compiled ``(state, inputs, records) -> batch``: record ``records[k]`` as row ``k``."""

    def build() -> Any:
        def read(state: Any, inputs: Any, records: Any) -> Batch:
            child = nnx.merge(graphdef, state)
            with child.bind_step_inputs(inputs):
                return jax.vmap(lambda start: child.get_batch_at(start, 1))(records)

        return jax.jit(read)

    return cached(("mix-sampled-read", graphdef), build)


def interleave(parts: dict[int, Batch], owners: np.ndarray, spec: dict[str, Any]) -> Batch:
    """One batch whose record ``k`` is the next record of ``parts[owners[k]]``.

    >>> parts = {0: {"x": np.array([1, 2])}, 1: {"x": np.array([10])}}
    >>> spec = {"x": jax.ShapeDtypeStruct((), np.int64)}
    >>> interleave(parts, np.array([0, 1, 0]), spec)["x"].tolist()
    [1, 10, 2]
    """
    out: Batch = {}
    for key, field in spec.items():
        if isinstance(field, TextSpec):
            column: list[Any] = [None] * len(owners)
            for i, part in parts.items():
                values = part[key]
                values = values.tolist() if isinstance(values, np.ndarray) else list(values)
                for slot, value in zip(np.flatnonzero(owners == i).tolist(), values):
                    column[slot] = value
            out[key] = column
            continue
        array = np.empty((len(owners), *field.shape), np.dtype(field.dtype))
        for i, part in parts.items():
            array[owners == i] = np.asarray(part[key])
        out[key] = array
    return out
