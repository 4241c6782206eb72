"""A custom CSV data source (verbatim from the "Working with Data Sources" guide)."""

import csv
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.spec import array_to_spec_strip_leading


@dataclass(frozen=True)
class CSVDataSourceConfig(StructuralConfig):
    """Configuration for CSVDataSource."""

    file_path: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.file_path is None:
            raise ValueError("file_path is required")


class CSVDataSource(DataSourceModule):
    """Random-access data source that reads numeric rows from a CSV file."""

    # Narrow config type for pyright (base stores via nnx.static)
    config: CSVDataSourceConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: CSVDataSourceConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        # A StructuralConfig-derived config is the required first argument.
        super().__init__(config, rngs=rngs, name=name)

        # Load all rows once at construction (skip the header row).
        with open(config.file_path, newline="") as f:
            reader = csv.reader(f)
            next(reader)  # skip header
            rows = [[float(value) for value in row] for row in reader]

        # Wrap array data with nnx.data so NNX treats it as pytree data,
        # not trainable parameters.
        self.data = nnx.data(jnp.asarray(rows))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def get_batch_at(self, start: int | Any, size: int, key: Any | None = None) -> dict[str, Any]:
        # Return `size` rows starting at `start`, wrapping at the end.
        indices = (jnp.arange(size) + start) % len(self)
        return {"features": self.data[indices]}

    def element_spec(self) -> dict[str, Any]:
        # Declare exactly what get_batch_at emits: one row of float32 features.
        return {"features": array_to_spec_strip_leading(self.data)}


if __name__ == "__main__":  # run as a script: a small CSV file, read through a Pipeline
    import os
    import tempfile

    from datarax.pipeline import Pipeline

    path = os.path.join(tempfile.mkdtemp(prefix="datarax_csv_"), "rows.csv")
    with open(path, "w") as f:
        f.write("a,b,c\n" + "".join(f"{i},{i / 2},{-i}\n" for i in range(10)))
    source = CSVDataSource(CSVDataSourceConfig(file_path=path))
    print("element spec:", {k: (v.shape, str(v.dtype)) for k, v in source.element_spec().items()})
    print("batch shapes:", [batch["features"].shape for batch in Pipeline(source=source, stages=[], batch_size=4)])
