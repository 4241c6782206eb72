"""ArrayRecordSourceModule in a Pipeline (verbatim from the "Working with Data Sources" guide).

Run it from a folder holding ``path/to/arrayrecord/file`` (float32 records).
"""

import numpy as np
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceModule, ArrayRecordSourceConfig
from flax import nnx


def decode(record: bytes) -> dict[str, np.ndarray]:
    # ArrayRecord records are bytes; turn one into a dict of arrays.
    return {"features": np.frombuffer(record, dtype=np.float32)}


# Create source from array record file (config first, then path)
config = ArrayRecordSourceConfig()
source = ArrayRecordSourceModule(config, "path/to/arrayrecord/file", decode=decode)

# Each pass over the pipeline covers one epoch of decoded batches
pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))
