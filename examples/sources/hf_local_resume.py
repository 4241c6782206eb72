"""HF sources on local data: eager vs streaming, from_hf, exact mid-epoch resume."""

import json
import os
import tempfile

try:
    import datasets
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[hf]"') from err
import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sources import HFEagerConfig, HFEagerSource, HFStreamingConfig, HFStreamingSource, from_hf

folder = os.path.join(tempfile.mkdtemp(prefix="datarax_hf_"), "reviews")
rows = {
    "text": [f"review {i}" for i in range(1000)],
    "label": np.arange(1000, dtype=np.int64) % 5,  # int64: cast to int32 (values checked)
    "features": np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float32),
}
datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(folder)

# Eager: numeric fields on the device, shuffled by the Feistel permutation (seed + epoch).
eager = HFEagerSource(HFEagerConfig(name=folder, split="train[:80%]", exclude_keys=("text",),
                                    shuffle=True, seed=0))
print("eager:", len(eager), {k: (v.shape, str(v.dtype)) for k, v in eager.element_spec().items()})

# Streaming: text travels with the batch; each `for` is one pass; resume is exact.
def build():
    config = HFStreamingConfig(name=folder, split="train", shuffle=True, seed=0)
    return Pipeline(source=HFStreamingSource(config), stages=[], batch_size=64, rngs=nnx.Rngs(0))

pipeline = build()
it = iter(pipeline)
seen = [next(it)["text"] for _ in range(3)]
state = json.dumps(it.get_state())
print("state:", state)
resumed = build()
resumed.set_state(json.loads(state))
print("resumed batch starts with:", next(iter(resumed))["text"][:2])

# from_hf: a split of known size up to 256 MiB loads eagerly (text fields stay on the
# host); an explicit streaming=True / False always wins.
print(type(from_hf(folder, "train")).__name__,
      type(from_hf(folder, "train", streaming=True)).__name__)
