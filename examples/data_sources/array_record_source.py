"""ArrayRecordSourceModule in a Pipeline (the "Working with Data Sources" guide's example).

The guide reads ``path/to/arrayrecord/file``. So that the script runs as is, it first
writes that file (100 records of 3 float32 values, record ``i`` holding
``[3i, 3i+1, 3i+2]``) in a new temporary folder, as the ArrayRecord quick reference
does — unless the current folder already holds one, which it then reads. The guide's
code below is unchanged.
"""

import os
import tempfile

import numpy as np
try:
    from array_record.python.array_record_module import ArrayRecordWriter
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[arrayrecord]"') from err

if not os.path.isfile("path/to/arrayrecord/file"):
    os.chdir(tempfile.mkdtemp(prefix="datarax_arrayrecord_"))
    os.makedirs("path/to/arrayrecord")
    writer = ArrayRecordWriter("path/to/arrayrecord/file", "group_size:1")
    for row in np.arange(100 * 3, dtype=np.float32).reshape(100, 3):
        writer.write(row.tobytes())
    writer.close()

# ---- the guide's example, unchanged ------------------------------------------------
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
# ---- end of the guide's example ---------------------------------------------------

if __name__ == "__main__":
    for step, batch in enumerate(pipeline):
        print(f"batch {step}: features {tuple(batch['features'].shape)}")
    source.close()
