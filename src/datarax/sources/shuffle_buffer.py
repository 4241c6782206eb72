"""``ShuffleBufferSource``: a source's records shuffled within a buffer, read forward.

For sources without random access (a stream, a mixture, files read in order): the
parent's pass (in its own order) is cut into windows of ``B = buffer_size`` records, and
output ``t`` of pass ``e`` is record ``perm[t % B]`` of window ``t // B``, ``perm`` the
Feistel permutation keyed by ``window_seed((seed + e) % 2**32, t // B)``
(:func:`datarax.samplers.shard_window.permute`). A record never leaves its window:
shuffle the parent too where records ``B`` apart must mix.

* **State** is the position alone; a restore re-reads the window holding it (from its
  start, in reads of ``max(B, 64)`` parent records, 4096 at most; a stream or skipping
  parent reads its pass again up to there).
* **Memory:** one window of ``buffer_size`` records on the host, plus the rest of the
  last read (fewer than ``max(B, 64)`` records, 4096 at most).
* **Stable index**: the parent record's own, so a record keeps its augmentation.
* **Shards**: every process reads the whole pass and keeps record ``i`` of each whole
  round of ``P``.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig, ShuffleBufferSource
    >>> parent = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    >>> source = ShuffleBufferSource(parent, buffer_size=4, seed=0)
    >>> batch, stable = source.get_batch_with_indices(10)
    >>> [sorted(batch["x"][lo:lo + 4].tolist()) for lo in (0, 4, 8)]  # windows of 4
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    >>> bool((batch["x"] == stable).all()), source.get_state()["current_index"]
    (True, 10)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from datarax.core.batch import concat_batches, take_records
from datarax.core.children import ChildSources, check_child, check_no_config, child_settings
from datarax.core.config import StructuralConfig, check_int, check_seed
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import LengthIfKnown, stable_index_bound
from datarax.core.module import HostState
from datarax.core.position import past_the_end
from datarax.core.spec import checked_spec
from datarax.samplers.shard_window import permute, window_seed
from datarax.sources.child_records import CHUNK, ChildRecords, ForwardReads, Stands, rows_of
from datarax.sources.source_call import MISSING
from datarax.typing import Batch

__all__ = ["ShuffleBufferSource", "ShuffleBufferSourceConfig", "window_order"]

MAX_CHUNK = 4096  # the most parent records read at once


@dataclass(frozen=True)
class ShuffleBufferSourceConfig(StructuralConfig):
    """Configuration of :class:`ShuffleBufferSource`.

    Attributes:
        buffer_size: records in one window (>= 1; 1 serves the parent's order).
        seed: decides each window's permutation (with the pass and the window's number).
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
    """

    buffer_size: int = 1
    seed: int = 0
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "buffer_size", minimum=1)
        check_seed(self, "seed")


def window_order(length: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """The order in which window ``window`` of pass ``epoch`` serves its ``length``
    records (positions in the window).

    Example:
        >>> sorted(window_order(5, seed=0, epoch=0, window=0).tolist())
        [0, 1, 2, 3, 4]
    """
    return permute(np.arange(length), length, window_seed((seed + epoch) % 2**32, window))


class _Window(HostState):
    """The window being served (never state: rebuilt from the position on every restore)."""

    def __init__(self) -> None:
        self.reads: ChildRecords | None = None  # the parent, after the window
        self.number = 0  # the window's number in the pass
        self.batch: Batch = {}  # its records, in serving order
        self.stable = np.zeros(0, np.int64)
        self.served = 0  # of its records


class ShuffleBufferSource(ForwardReads, LengthIfKnown, ChildSources, DataSourceModule):
    """Records of ``source`` (any kind, unsharded) shuffled within windows of
    ``buffer_size``; see the module docstring.

    Raises:
        ConfigError: ``buffer_size`` not an int >= 1, or a bad seed.
        SourceContractError: a parent that is not a source or is sharded.
    """

    kind: ClassVar[SourceKind | None] = SourceKind.STREAM

    def __init__(
        self,
        source: DataSourceModule,
        *extra: Any,
        buffer_size: int = MISSING,
        seed: int = 0,
        num_epochs: int = 1,
        name: str | None = None,
    ) -> None:
        check_no_config("ShuffleBufferSource", (source,), extra, takes="the source it shuffles",
                        call="ShuffleBufferSource(source, buffer_size=..., seed=0)",
                        left_out=["buffer_size"] if buffer_size is MISSING else [])
        check_child("ShuffleBufferSource", "source", source, whole="the shuffled source",
                    children="parent")
        config = ShuffleBufferSourceConfig(buffer_size=buffer_size, seed=seed,
                                           num_epochs=num_epochs)
        super().__init__(config, name=name)
        self.source = source
        self.__length = source.epoch_size()
        self.__window = _Window()
        self._stands = Stands()

    # ------------------------------------------------------------ description
    def length_or_reason(self) -> str:
        return "it is read as a stream (its pass holds every record of the parent's pass, once)."

    def stable_index_bound(self) -> int | None:
        """The parent's: its records keep their stable indices."""
        return stable_index_bound(self.source)

    def element_spec(self) -> dict[str, Any]:
        return dict(checked_spec(self.source))

    def _children(self) -> Any:
        return (self.source,)

    # ------------------------------------------------------------------ reads
    def _open(self) -> None:
        """Stand at the position: read its window again from the window's start."""
        epoch, index = self.datarax_position.where()
        size = self.config.buffer_size
        number, offset = divmod(index * self.shard.count, size)
        self._load_from(epoch, number)
        if number and not offset and not len(self.__window.stable):
            # an empty window at its start: the pass must end there (the window before full)
            number, offset = number - 1, size
            self._load_from(epoch, number)
        if offset > len(self.__window.stable):
            raise past_the_end("ShuffleBufferSource", epoch, index)
        self.__window.served = offset
        self._stood()

    def _load_from(self, epoch: int, number: int) -> None:
        """Stand the parent at window ``number``'s start of pass ``epoch`` and read it."""
        size = self.config.buffer_size
        self.__window = window = _Window()
        chunk = min(max(size, CHUNK), MAX_CHUNK)
        window.reads = ChildRecords(self.source, epoch, number * size, chunk=chunk,
                                    who=f"ShuffleBufferSource parent "
                                        f"({type(self.source).__name__})")
        self._load(number)

    def _load(self, number: int) -> None:
        """Read window ``number`` (the parent's next ``buffer_size`` records) and
        put it in its serving order."""
        window = self.__window
        assert window.reads is not None
        parts, stables, have = [], [], 0
        while have < self.config.buffer_size:
            got = window.reads.take(self.config.buffer_size - have)
            if got is None:
                break
            parts.append(got[0])
            stables.append(got[1])
            have += len(got[1])
        window.number, window.served = number, 0
        if not parts:
            window.batch, window.stable = {}, np.zeros(0, np.int64)
            return
        order = window_order(have, self.config.seed, window.reads.epoch, number)
        window.batch = take_records(concat_batches(parts), order)
        window.stable = np.concatenate(stables)[order]

    def _outputs(self, count: int) -> tuple[Batch | None, np.ndarray]:
        """The pass's next ``count`` records (all shards; fewer only at its end)."""
        window = self.__window
        parts: list[Batch] = []
        stables: list[np.ndarray] = []
        have = 0
        while have < count:
            if window.served >= len(window.stable):
                if len(window.stable) < self.config.buffer_size:
                    break  # a short (or empty) window is the pass's last
                self._load(window.number + 1)
                continue
            start = window.served
            stop = min(start + count - have, len(window.stable))
            parts.append(rows_of(window.batch, start, stop))
            stables.append(window.stable[start:stop])
            window.served, have = stop, have + stop - start
        if not parts:
            return None, np.zeros(0, np.int64)
        return concat_batches(parts), np.concatenate(stables)

    # ------------------------------------------------------------------ state
    def order_settings(self) -> dict[str, Any]:
        """``buffer_size``, ``seed``, then the parent's type, length and settings under
        ``parent.``."""
        out: dict[str, Any] = {"buffer_size": self.config.buffer_size, "seed": self.config.seed}
        out.update(child_settings("parent.", self.source, self.__length))
        return out
