"""Sampling with replacement for :class:`~datarax.mixing.MixSource` (``mode="sampling"``).

Draw ``t`` of source ``i`` reads record ``hash32(seed, i, t) % n``: a pure function, so a
sampling mixture resumes by seeking, and the host (NumPy) and compiled (``jax.numpy``)
paths pick the same records.

Example:
    >>> import numpy as np
    >>> a = sampled_records(0, 1, np.arange(6), 10)
    >>> a.tolist() == sampled_records(0, 1, np.arange(6), 10).tolist(), bool((a < 10).all())
    (True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np


class SampledOrder:
    """A host reader's epoch order for sampling mode (duck-types ``EpochOrder``)."""

    def __init__(self, seed: int, source: int, length: int) -> None:
        self.seed, self.source, self.length = seed, source, length
        self.epoch, self.lo, self.hi = 0, 0, None
        self.size = 1 << 62
        # no epoch blocks: the reader reads no "next epoch" ahead (the draws are endless)
        self.runs: tuple[tuple[int, int], ...] = ()

    def indices(self, start: int, stop: int) -> np.ndarray:
        return sampled_records(self.seed, self.source, np.arange(start, stop, dtype=np.int64), self.length)

    def describe(self) -> dict[str, Any]:
        return {"seed": self.seed, "source": self.source, "sampled": True}


def sampled_records(seed: int, source: int, draws: Any, length: int, xp: Any = np) -> Any:
    """Record of each draw of a sampling mixture: a 32-bit hash of ``(seed, source, draw)``
    modulo ``length`` (the same for ``xp=numpy`` on the host and ``jax.numpy`` in a step)."""
    salt = (int(seed) * 0x9E3779B1 + (int(source) + 1) * 0x85EBCA77) & 0xFFFFFFFF
    with np.errstate(over="ignore"):
        x = xp.asarray(draws).astype(xp.uint32) ^ xp.uint32(salt)
        x = (x ^ (x >> 16)) * xp.uint32(0x7FEB352D)
        x = (x ^ (x >> 15)) * xp.uint32(0x846CA68B)
        x = x ^ (x >> 16)
        return (x % xp.uint32(length)).astype(xp.int32)
