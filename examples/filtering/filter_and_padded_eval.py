"""Filter by label, then evaluate with a padded last batch.

Trains a small Flax NNX classifier only on the records whose label is below 3 (a
``FilterOperator`` stage), saves the state mid-epoch and checks a restored pipeline
continues with the same batches, then evaluates the same classes with
``pad_remainder=True``: every batch has one shape (the eval step compiles once) and the
``valid`` field makes each record count exactly once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

CLASSES, FEATURES = 10, 16


def make_data(n: int, seed: int) -> dict[str, np.ndarray]:
    centers = np.random.default_rng(0).normal(size=(CLASSES, FEATURES)).astype(np.float32) * 3
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n).astype(np.int32)
    x = centers[labels] + rng.normal(size=(n, FEATURES)).astype(np.float32)
    return {"x": x, "label": labels}


def pipeline(data: dict[str, np.ndarray], **options) -> Pipeline:
    keep = FilterOperator(predicate=lambda el: el.data["label"] < 3)
    scale = ElementOperator(fn=lambda el, key=None: {"x": el.data["x"] / 3.0})
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0), data)
    return Pipeline(source, stages=[keep, scale], batch_size=32, rngs=nnx.Rngs(0), **options)


def main() -> None:
    model = nnx.Linear(FEATURES, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(0.05), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    train = pipeline(make_data(2000, seed=1), drop_remainder=True)
    for epoch in range(2):
        for batch in train:
            train_step(model, optimizer, batch)
    stats = train.stats()["filter"]
    print(f"trained on labels 0-2: kept {stats['kept']}, dropped {stats['dropped']}")

    # Exact resume: a state taken after 3 batches continues with the same batches.
    first = pipeline(make_data(2000, seed=1))
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    state = first.get_state()
    rest = [np.asarray(b["label"]) for b in iterator]
    again = pipeline(make_data(2000, seed=1))
    again.set_state(state)
    same = all(np.array_equal(a, np.asarray(b["label"])) for a, b in zip(rest, again, strict=True))
    print(f"resumed batches identical: {same}")

    compiles = []

    @jax.jit
    def eval_step(params, batch):
        compiles.append(1)  # runs once per compile (trace)
        logits = nnx.merge(graph, params)(batch["x"])
        hit = (logits.argmax(-1) == batch["label"]) & batch["valid"]
        return hit.sum(), batch["valid"].sum()

    graph, params = nnx.split(model)
    test_data = make_data(500, seed=2)
    hits = seen = 0
    for batch in pipeline(test_data, pad_remainder=True):
        h, s = eval_step(params, batch)
        hits, seen = hits + int(h), seen + int(s)
    expected = int((test_data["label"] < 3).sum())
    print(f"evaluated {seen} records of {expected}, eval compiles: {len(compiles)}")
    print(f"accuracy above 0.9: {hits / seen > 0.9}")


if __name__ == "__main__":
    main()
