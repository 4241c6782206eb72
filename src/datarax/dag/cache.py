"""``CachedPrefix``: another source's records after a deterministic stage prefix, kept
in host memory by stable index.

A record's prefix output depends only on its stable index, so resume is exact whether the
cache is full, partly filled or empty.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import record_at, stack_records
from datarax.core.config import check_count
from datarax.core.errors import ConfigError
from datarax.core.operator import OperatorModule
from datarax.core.dtypes import is_host_leaf, is_text_scalar
from datarax.core.stages import apply_stages
from datarax.sources.random_access import RandomAccessSource
from datarax.sources.skip_ledger import ErrorPolicy


def _nbytes(record: dict[str, Any]) -> int:
    """Host bytes a record's fields take (text counted by its UTF-8 length)."""
    total = 0
    for value in record.values():
        if isinstance(value, dict):
            total += _nbytes(value)
        elif is_text_scalar(value):
            total += len(value.encode() if isinstance(value, str) else value)
        else:
            total += np.asarray(value).nbytes
    return total


def _to_host(batch: dict[str, Any]) -> dict[str, Any]:
    return jax.tree.map(
        lambda v: list(v) if isinstance(v, list) else np.asarray(v), batch,
        is_leaf=is_host_leaf,
    )


class _RecordCache:
    """Prefix outputs by stable index, up to ``max_bytes`` (then no more are added)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.records: dict[int, dict[str, Any]] = {}
        self.bytes = 0
        self.full = False
        self.hits = 0
        self.misses = 0
        self.lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> _RecordCache:
        """A copy holds the records cached so far (shared: never written)."""
        twin = _RecordCache(self.max_bytes)
        with self.lock:
            twin.records, twin.bytes, twin.full = dict(self.records), self.bytes, self.full
        return twin


class CachedPrefix(RandomAccessSource):
    """``source``'s records through deterministic ``stages``, cached in host memory.

    Put the expensive deterministic stages here and the random ones in the Pipeline.

    Args:
        source: a :class:`~datarax.sources.random_access.RandomAccessSource` (its length,
            order, seed and bad-record policy are used).
        stages: deterministic operators or callables ``batch -> batch``.
        max_bytes: host memory the cache may hold; past it the rest are recomputed each
            epoch (``cache_info()["full"]``).

    Example:
        >>> import numpy as np
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources.random_access import RandomAccessSource
        >>> from datarax.core.config import StructuralConfig
        >>> class Rows(RandomAccessSource):
        ...     def __init__(self, n):
        ...         super().__init__(StructuralConfig())
        ...         self.n = n
        ...     def __len__(self):
        ...         return self.n
        ...     def read_records(self, indices):
        ...         return [{"x": np.float32(i)} for i in indices]
        >>> cached = CachedPrefix(Rows(6), [lambda b: {"x": b["x"] * 10}], max_bytes=1 << 20)
        >>> p = Pipeline(source=cached, stages=[], batch_size=4)
        >>> [b["x"].tolist() for b in p], cached.cache_info()["records"]
        ([[0.0, 10.0, 20.0, 30.0], [40.0, 50.0]], 6)
        >>> cached.close()
    """

    def __init__(self, source: RandomAccessSource, stages: Sequence[Any], *,
                 max_bytes: int, num_threads: int = 4, read_ahead: int | None = None) -> None:
        if not isinstance(source, RandomAccessSource):
            raise ConfigError(
                f"CachedPrefix needs a RandomAccessSource (records read by stable index); "
                f"got {type(source).__name__}. In-memory sources need no cache."
            )
        if type(source).read_records is RandomAccessSource.read_records:
            raise ConfigError(
                f"CachedPrefix reads records by stable index through read_records(indices), "
                f"which {type(source).__name__} does not implement: it cannot be cached. "
                "Put its stages in the Pipeline instead."
            )
        max_bytes = check_count(max_bytes, "CachedPrefix max_bytes", 0)  # NumPy ints too
        if isinstance(stages, (OperatorModule, str)) or not isinstance(stages, Sequence):
            raise ConfigError(
                f"CachedPrefix stages must be a list of deterministic stages, got "
                f"{type(stages).__name__}; pass [] for none, or wrap one stage: [stage]."
            )
        for position, stage in enumerate(stages):
            if not callable(stage) and not isinstance(stage, OperatorModule):
                raise ConfigError(
                    f"CachedPrefix stage {position} is {type(stage).__name__}, neither an "
                    "operator module nor a callable taking and returning a batch dict."
                )
            if isinstance(stage, OperatorModule) and stage.stochastic:
                raise ConfigError(
                    f"CachedPrefix stage {position} ({type(stage).__name__}) is stochastic: "
                    "a cached output would repeat the same draw every epoch. Cache only "
                    "deterministic stages (stochastic=False) and put this one in the "
                    "Pipeline's stages."
                )
        super().__init__(source.config, num_threads=num_threads, read_ahead=read_ahead)
        self.inner = source
        self.stages = nnx.List(list(stages))
        self.__cache = _RecordCache(max_bytes)

    def __len__(self) -> int:
        return len(self.inner)

    def order_settings(self) -> dict[str, Any]:
        """The cached source's order settings (its seed and shuffle decide the epoch)."""
        return self.inner.order_settings()

    def shuffle_seed(self) -> int | None:
        return self.inner.shuffle_seed()

    def locate(self, index: int) -> tuple[str | None, int]:
        return self.inner.locate(index)

    def error_policy(self) -> ErrorPolicy:
        return self.inner.error_policy()

    def close(self) -> None:
        """Stop the reader threads and close ``source``."""
        super().close()
        self.inner.close()

    def cache_info(self) -> dict[str, Any]:
        """``records``, ``bytes``, ``max_bytes``, ``full``, ``hits`` and ``misses``."""
        c = self.__cache
        with c.lock:
            return {"records": len(c.records), "bytes": c.bytes, "max_bytes": c.max_bytes,
                    "full": c.full, "hits": c.hits, "misses": c.misses}

    def read_records(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Prefix outputs of the records at ``indices`` (the missing ones in one batched call)."""
        cache = self.__cache
        wanted = [int(i) for i in indices]
        with cache.lock:
            found = {i: cache.records[i] for i in wanted if i in cache.records}
            cache.hits += len(found)
        missing = [i for i in wanted if i not in found]
        if missing:
            raw = self.inner.read_records(missing)
            batch = stack_records([dict(self.inner.decode(r)) for r in raw])
            out = _to_host(apply_stages(list(self.stages), batch, jnp.asarray(missing), 0, None))
            with cache.lock:
                cache.misses += len(missing)
                for row, index in enumerate(missing):
                    record = record_at(out, row)
                    found[index] = record
                    if index in cache.records or cache.full:
                        continue
                    size = _nbytes(record)
                    if cache.bytes + size > cache.max_bytes:
                        cache.full = True  # stop caching; keep computing
                        continue
                    cache.records[index] = record
                    cache.bytes += size
        return [found[i] for i in wanted]
