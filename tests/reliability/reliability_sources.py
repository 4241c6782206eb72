"""Sources and pipeline builders the reliability tests share (also used by child processes).

* ``CSVDataSource`` — the custom indexed source of the "Working with Data Sources" page.
* ``CountingStream`` — a forward-only stream implementing only ``get_batch`` and
  ``element_spec``: it opens its pass lazily and its values depend on the epoch.
* ``make_memory_pipeline`` — MemorySource (dict or list) with optional shuffle and a
  stochastic stage, the workhorse of the resume and multi-host tests.
"""

from __future__ import annotations

import csv
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_int
from datarax.core.data_source import DataSourceModule
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


# --------------------------------------------------------------------- CSV (seed page)
# The page's CSVDataSource, loaded from its verbatim copy in examples/ (one definition).
_CSV_EXAMPLE = runpy.run_path(
    str(Path(__file__).resolve().parents[2] / "examples" / "data_sources" / "custom_csv_source.py")
)
CSVDataSourceConfig = _CSV_EXAMPLE["CSVDataSourceConfig"]
CSVDataSource = _CSV_EXAMPLE["CSVDataSource"]


def write_csv(path: Any, num_rows: int, num_cols: int = 3) -> str:
    """A CSV file of ``num_rows`` numeric rows (row ``i`` holds ``i*10 + j``)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"c{j}" for j in range(num_cols)])
        for i in range(num_rows):
            writer.writerow([i * 10 + j for j in range(num_cols)])
    return str(path)


# -------------------------------------------------------------- forward-only stream
@dataclass(frozen=True)
class CountingStreamConfig(StructuralConfig):
    """``num_records`` records per pass; values depend on ``seed`` and the epoch."""

    num_records: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_records", minimum=0)
        check_int(self, "seed", minimum=0)


class CountingStream(DataSourceModule):
    """A forward-only stream written to the stream contract: ``get_batch``,
    ``element_spec`` and ``restart(epoch)``.

    ``restart`` opens pass ``epoch``: a generator seeded by ``seed + epoch`` (so skipping
    forward must replay the generator exactly); once a pass ends it keeps returning
    None until the next ``restart``.
    """

    def __init__(self, config: CountingStreamConfig, *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__(config, rngs=rngs)
        self._stream: Any = None
        self.opened = 0  # passes opened (lets tests see re-reads)

    def restart(self, epoch: int) -> None:
        self._stream = self._open(epoch)

    def _open(self, epoch: int) -> Any:
        rng = np.random.default_rng(self.config.seed + epoch)
        self.opened += 1
        for i in range(self.config.num_records):
            yield i, rng.integers(0, 1000), rng.random(2).astype(np.float32)

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        if self._stream is None:
            self.restart(self.epoch)
        ids, ints, vecs = [], [], []
        for record in self._stream:
            ids.append(record[0])
            ints.append(record[1])
            vecs.append(record[2])
            if len(ids) == batch_size:
                break
        if not ids:  # the pass is over; stay exhausted until the cursor's epoch moves
            return None
        return {
            "id": np.asarray(ids, np.int32),
            "value": np.asarray(ints, np.int32),
            "vec": np.stack(vecs),
        }

    def element_spec(self) -> dict[str, Any]:
        return {
            "id": jax.ShapeDtypeStruct((), np.int32),
            "value": jax.ShapeDtypeStruct((), np.int32),
            "vec": jax.ShapeDtypeStruct((2,), np.float32),
        }


# ------------------------------------------------------------------------ stages
def add_noise(element: Any, key: Any) -> Any:
    """A stochastic stage: one uniform draw per record, kept in field 'noise'."""
    return element.update_data({"noise": jax.random.uniform(key, (2,))})


def scale_first(element: Any, key: Any = None) -> Any:
    """A deterministic stage touching every numeric field (times two)."""
    return element.update_data({k: v * 2 for k, v in element.data.items() if k != "id"})


def stages(stochastic: bool) -> list[Any]:
    ops: list[Any] = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=scale_first)]
    if stochastic:
        ops.append(ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise))
    return ops


# --------------------------------------------------------------- pipeline builders
def memory_data(num_records: int, as_list: bool) -> Any:
    """Records ``{"x": i, "y": [i, -i] as float32}`` as a list or a dict of arrays."""
    x = np.arange(num_records, dtype=np.int32)
    y = np.stack([x, -x], axis=1).astype(np.float32)
    if as_list:
        return [{"x": int(x[i]), "y": y[i]} for i in range(num_records)]
    return {"x": x, "y": y}


def make_memory_pipeline(
    num_records: int,
    batch_size: int,
    *,
    shuffle: bool = False,
    seed: int = 7,
    as_list: bool = False,
    stochastic: bool = False,
    drop_remainder: bool = False,
    shard_index: int | None = None,
    shard_count: int | None = None,
) -> Pipeline:
    source = MemorySource(
        MemorySourceConfig(shuffle=shuffle, seed=seed), memory_data(num_records, as_list)
    )
    return Pipeline(
        source=source,
        stages=stages(stochastic),
        batch_size=batch_size,
        rngs=nnx.Rngs(0),
        drop_remainder=drop_remainder,
        shard_index=shard_index,
        shard_count=shard_count,
    )
