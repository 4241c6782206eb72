"""HF streaming + extract_fields (the seed's example, unchanged), on local data.

The seed streams ``stanfordnlp/sst2`` from the Hugging Face Hub. To run offline, this
script first writes a small local copy laid out like the Hub repo
(``stanfordnlp/sst2/data/train-*.parquet`` with ``sentence``/``label``/``idx``) in a
temporary working directory: ``datasets`` resolves a name that is an existing local
folder before asking the Hub, so the seed code below reads the local copy. Run it with
``--hub`` (and network access) to stream the real dataset instead.
"""

import os
import sys
import tempfile

if "--hub" not in sys.argv:
    import numpy as np

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError as err:  # an optional package
        raise SystemExit(f'{err}; this example needs: pip install "datarax[hf]"') from err

    workdir = tempfile.mkdtemp(prefix="datarax_sst2_")
    os.makedirs(os.path.join(workdir, "stanfordnlp", "sst2", "data"))
    n = 200
    pq.write_table(
        pa.table(
            {
                "idx": np.arange(n, dtype=np.int32),
                "sentence": [f"local sentence number {i}" for i in range(n)],
                "label": np.arange(n, dtype=np.int64) % 2,
            }
        ),
        os.path.join(workdir, "stanfordnlp", "sst2", "data", "train-00000-of-00001.parquet"),
    )
    os.chdir(workdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

# ---- the seed's example, unchanged -------------------------------------------------
from datarax.pipeline import Pipeline
from datarax.sources import HFStreamingSource, HFStreamingConfig
from datarax.operators import ElementOperator, ElementOperatorConfig
from flax import nnx

# Stream a large dataset from HuggingFace (streaming keeps memory bounded)
config = HFStreamingConfig(
    name="stanfordnlp/sst2",
    split="train",
    streaming=True,
)
train_source = HFStreamingSource(config, rngs=nnx.Rngs(0))

# Define field extraction as an operator
def extract_fields(element, key=None):
    return element.update_data({
        "text": element.data["sentence"],
        "label": element.data["label"]
    })

extractor = ElementOperator(
    ElementOperatorConfig(stochastic=False),
    fn=extract_fields
)

# Create pipeline
pipeline = (
    Pipeline(source=train_source, stages=[extractor], batch_size=16, rngs=nnx.Rngs(0)))

# Iterate
for i, batch in enumerate(pipeline):
    # Process batch
    print(f"Batch {i}: {batch['text'][:2]}...")  # Print first 2 texts
    if i >= 2:
        break
