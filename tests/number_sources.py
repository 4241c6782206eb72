"""Sources of numbered records for the tests (``tests/conftest.py`` puts this folder on
``sys.path``; ``source_reads.py`` reads them).

``numbers(lo, hi)`` is a :class:`MemorySource` of ``lo .. hi - 1``; :class:`NumberStream`
the same numbers as a forward-only stream, with the pass-by-pass variations the
combinator tests need (an offset or a reversal per pass, short reads, a failing read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from datarax.core.config import StructuralConfig
from datarax.sources import MemorySource, MemorySourceConfig, StreamSource


def numbers(lo: int, hi: int, *, shuffle: bool = False, seed: int = 0, field: str = "x",
            **extra: Any) -> MemorySource:
    """A :class:`MemorySource` of ``{field: lo .. hi - 1}`` (``int32``) plus ``extra``
    fields, shuffled from ``seed`` when ``shuffle``."""
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed),
                        {field: np.arange(lo, hi, dtype=np.int32), **extra})


@dataclass(frozen=True)
class NumberStreamConfig(StructuralConfig):
    lo: int = 0
    hi: int = 0
    field: str = "x"
    epoch_step: int = 0
    reverse_odd_passes: bool = False


class NumberStream(StreamSource):
    """A generator-backed forward-only stream: pass ``e`` serves ``{field: v}`` for ``v``
    in ``lo + e * epoch_step .. hi + e * epoch_step - 1``, backwards on odd passes when
    ``reverse_odd_passes``.

    It counts the passes it opened (``opened``), its reads (``reads``) and the records
    it handed out (``served``); ``most_per_read`` caps the records of one read and
    ``fail_on_read`` makes that read (1-based, counted over all passes) raise
    ``OSError("the disk hiccuped")`` once.
    """

    def __init__(self, lo: int, hi: int, *, field: str = "x", epoch_step: int = 0,
                 reverse_odd_passes: bool = False, most_per_read: int | None = None,
                 fail_on_read: int | None = None) -> None:
        super().__init__(NumberStreamConfig(lo=lo, hi=hi, field=field, epoch_step=epoch_step,
                                            reverse_odd_passes=reverse_odd_passes))
        self.most_per_read, self.fail_on_read = most_per_read, fail_on_read
        self.records: Any = iter(())
        self.opened = self.reads = self.served = 0

    def restart(self, epoch: int) -> None:
        c = self.config
        values = range(c.lo + epoch * c.epoch_step, c.hi + epoch * c.epoch_step)
        self.records = iter(reversed(values) if c.reverse_odd_passes and epoch % 2 else values)
        self.opened += 1

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        self.reads += 1
        if self.reads == self.fail_on_read:
            raise OSError("the disk hiccuped")
        size = min(batch_size, self.most_per_read or batch_size)
        x = [v for _, v in zip(range(size), self.records)]
        self.served += len(x)
        return {self.config.field: np.asarray(x, np.int32)} if x else None

    def element_spec(self) -> dict[str, Any]:
        return {self.config.field: jax.ShapeDtypeStruct((), np.int32)}


def memory_npy(folder: str, n: int = 4) -> str:
    """The URL ``memory://FOLDER/x.npy``, written there holding ``0 .. n - 1`` (int32): a
    remote file for the storage tests, with no server."""
    import io

    import fsspec

    buffer = io.BytesIO()
    np.save(buffer, np.arange(n, dtype=np.int32))
    fsspec.filesystem("memory").pipe(f"/{folder}/x.npy", buffer.getvalue())
    return f"memory://{folder}/x.npy"
