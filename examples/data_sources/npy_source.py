"""Train on memory-mapped ``.npy`` shards with ``NpySource``.

1. Writes a small two-class data set as ``.npy`` shards in a temporary folder: features
   in three shards, labels (int64, as numpy makes them) in one file.
2. Reads it with ``NpySource`` (one field per entry of ``paths``), shuffled anew each
   epoch, with a per-record noise stage, and trains a logistic regression in plain JAX.
3. Saves the pipeline's position mid-epoch, rebuilds everything and checks that the
   resumed run hands out exactly the batches the uninterrupted one did.

``NUM_RECORDS`` (environment variable, default 2000, at least 256) sets the data set's size.
"""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import NpySource, NpySourceConfig

NUM_RECORDS = int(os.environ.get("NUM_RECORDS", "2000"))
BATCH_SIZE = 64
if NUM_RECORDS < 4 * BATCH_SIZE:  # the resume below saves after batch 3 of at least 4
    raise SystemExit(f"NUM_RECORDS={NUM_RECORDS} is too small: this example needs at least "
                     f"{4 * BATCH_SIZE} records ({4} batches of {BATCH_SIZE})")

# ---- 1. the shards -----------------------------------------------------------------
folder = tempfile.mkdtemp(prefix="datarax_npy_")
rng = np.random.default_rng(0)
labels = rng.integers(0, 2, NUM_RECORDS)  # int64: NpySource narrows it to int32
features = (rng.normal(size=(NUM_RECORDS, 8)) + labels[:, None] * 1.5).astype(np.float32)
bounds = np.linspace(0, NUM_RECORDS, 4).astype(int)
feature_files = []
for k in range(3):
    path = os.path.join(folder, f"features-{k:05d}.npy")
    np.save(path, features[bounds[k] : bounds[k + 1]])
    feature_files.append(path)
np.save(os.path.join(folder, "labels.npy"), labels)

# ---- 2. source, pipeline, training -------------------------------------------------
config = NpySourceConfig(
    paths={"features": feature_files, "label": os.path.join(folder, "labels.npy")},
    shuffle=True,
    seed=0,
)


def jitter(element, key):
    noise = 0.05 * jax.random.normal(key, element.data["features"].shape)
    return element.update_data({"features": element.data["features"] + noise})


def build() -> Pipeline:
    source = NpySource(config)
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)]
    return Pipeline(source=source, stages=stages, batch_size=BATCH_SIZE, rngs=nnx.Rngs(0))


pipeline = build()
print("records:", len(pipeline.source), "batches per epoch:", len(pipeline))
print("element spec:", {k: (v.shape, str(v.dtype)) for k, v in pipeline.source.element_spec().items()})


def loss_fn(params, batch):
    logits = batch["features"] @ params["w"] + params["b"]
    y = batch["label"].astype(jnp.float32)
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)


@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), loss


params = {"w": jnp.zeros(8), "b": jnp.zeros(())}
for epoch in range(3):
    for batch in pipeline:
        params, loss = train_step(params, batch)
    print(f"epoch {epoch}: loss {float(loss):.3f}")
predictions = (features @ np.asarray(params["w"]) + float(params["b"])) > 0
accuracy = float(np.mean(predictions == labels))
print(f"train accuracy: {accuracy:.2f}")
assert accuracy > 0.7

# ---- 3. exact resume ---------------------------------------------------------------
reference = [np.asarray(b["features"]) for b in build()]
iterator = iter(pipeline := build())
first = [np.asarray(next(iterator)["features"]) for _ in range(3)]
state = iterator.get_state()  # a small JSON-able dict: save it with the model
iterator.close()
pipeline.source.close()
resumed = build()
rest = iter(resumed)
rest.set_state(state)
rest = [np.asarray(b["features"]) for b in rest]
same = len(first + rest) == len(reference) and all(
    np.array_equal(a, b) for a, b in zip(first + rest, reference)
)
print(f"resumed at batch 3 of {len(reference)}; identical batches: {same}")
assert same
resumed.source.close()
