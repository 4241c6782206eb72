"""Small ArrayRecord files and pipelines over them, for the reliability tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline

from reliability_sources import stages


def write_files(directory: Path, num_records: int, num_files: int = 2) -> str:
    """``num_files`` files of records ``{"id": i, "vec": [i, -i]}``; returns their glob."""
    from int_record_files import write_parts  # tests/ is on sys.path under pytest

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-num_records // num_files)
    parts = [range(f * per_file, min(num_records, (f + 1) * per_file)) for f in range(num_files)]
    write_parts(directory, parts, lambda i: np.asarray([i, i, -i], np.int32).tobytes(),
                name="data-{:03d}.array_record")
    return str(directory / "data-*.array_record")


class Decode:
    """bytes -> {"id", "vec"}; raises on the record ids in ``bad`` (a corrupt record)."""

    def __init__(self, bad: frozenset[int] = frozenset()) -> None:
        self.bad = bad

    def __call__(self, raw: bytes) -> dict[str, Any]:
        values = np.frombuffer(raw, np.int32)
        if int(values[0]) in self.bad:
            raise ValueError(f"record {int(values[0])} is corrupt")
        return {"id": values[0], "vec": values[1:].astype(np.float32)}


def make_arrayrecord_pipeline(
    paths: str,
    batch_size: int,
    *,
    shuffle: bool = False,
    stochastic: bool = True,
    drop_remainder: bool = False,
    bad: frozenset[int] = frozenset(),
    shard_index: int | None = 0,
    shard_count: int | None = 1,
    num_threads: int = 2,
) -> Pipeline:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    config = ArrayRecordSourceConfig(
        seed=11, shuffle_files=shuffle, on_error="skip" if bad else "raise"
    )
    source = ArrayRecordSourceModule(config, paths, decode=Decode(bad), num_threads=num_threads)
    return Pipeline(
        source=source,
        stages=stages(stochastic),
        batch_size=batch_size,
        rngs=nnx.Rngs(0),
        drop_remainder=drop_remainder,
        shard_index=shard_index,
        shard_count=shard_count,
    )


def close_source(pipeline: Pipeline) -> None:
    pipeline.source.close()
