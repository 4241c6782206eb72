"""Small sources for the device tests: indexed memory records, a host random-access
source and a stream (the reliability tests' CountingStream)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.sources.random_access import RandomAccessSource

RELIABILITY = Path(__file__).resolve().parent.parent / "reliability"
if str(RELIABILITY) not in sys.path:
    sys.path.insert(0, str(RELIABILITY))

from reliability_sources import (  # noqa: E402
    CountingStream,
    CountingStreamConfig,
    stages,
)


def records(n: int) -> dict[str, np.ndarray]:
    """``x = i``, ``y = [i, -i, 2i, 0.5]`` as float32."""
    x = np.arange(n, dtype=np.int32)
    y = np.stack([x, -x, 2 * x, np.full(n, 0.5)], axis=1).astype(np.float32)
    return {"x": x, "y": y}


@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    shuffle: bool = False
    seed: int = 0


class Rows(RandomAccessSource):
    """A host random-access source over :func:`records`."""

    def __init__(self, config: RowsConfig, n: int) -> None:
        super().__init__(config)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def read_records(self, indices: Any) -> list[dict[str, Any]]:
        # the same values as records(n), computed per index
        return [{"x": np.int32(i), "y": np.asarray([i, -i, 2 * i, 0.5], np.float32)}
                for i in indices]


def make_source(kind: str, n: int, *, shuffle: bool = False, seed: int = 3) -> Any:
    if kind == "indexed":
        return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed), records(n))
    if kind == "host":
        return Rows(RowsConfig(shuffle=shuffle, seed=seed), n)
    if kind == "stream":
        return CountingStream(CountingStreamConfig(num_records=n, seed=seed))
    raise ValueError(kind)


def make_pipeline(kind: str, n: int, batch_size: int, *, stochastic: bool = False,
                  shuffle: bool = False, **kwargs: Any) -> Pipeline:
    """A pipeline over ``make_source(kind, n)`` with the reliability stages."""
    return Pipeline(
        source=make_source(kind, n, shuffle=shuffle),
        stages=stages(stochastic) if kind != "stream" else [],
        batch_size=batch_size,
        rngs=nnx.Rngs(0),
        **kwargs,
    )


def host(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in batch.items()}
