"""Filter by label, then evaluate the demo's model with a padded last batch.

Trains the classifier of ``datarax demo`` (``make demo``: scikit-learn's 8x8 digits)
only on the digits 0-4 — a ``FilterOperator`` stage drops the others — saves the state
mid-epoch and checks a restored pipeline continues with the same batches, then
evaluates on the test split's digits 0-4 with ``pad_remainder=True``: every batch has
one shape (the eval step compiles once) and the ``valid`` field makes each record count
exactly once.

Needs the ``demo`` extra (scikit-learn for the digits, optax).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optax
from flax import nnx

from datarax.cli.demo import Classifier, load_digits_split
from datarax.operators import FilterOperator
from datarax.operators.image import Normalize
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

DIGITS = 5  # keep the digits 0 .. DIGITS - 1
BATCH = 32
EPOCHS = 2


def pipeline(data: dict[str, np.ndarray], **options: Any) -> Pipeline:
    """Shuffled digits -> keep the labels below DIGITS -> uint8 pixels as float32 in
    [0, 1] (the demo's Normalize)."""
    keep = FilterOperator(predicate=lambda el: el.data["label"] < DIGITS)
    stages = [keep, Normalize(mean=[0.0], std=[1.0])]
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0), data)
    return Pipeline(source, stages=stages, batch_size=BATCH, rngs=nnx.Rngs(0), **options)


def main() -> None:
    train, test = load_digits_split(seed=0)  # the demo's data and split
    model = Classifier(nnx.Rngs(0))  # the demo's model
    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model: Classifier, optimizer: nnx.Optimizer, batch: Any) -> Any:
        def loss_fn(model: Classifier) -> Any:
            logits = model(batch["image"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    loader = pipeline(train, drop_remainder=True)
    for _ in range(EPOCHS):
        for batch in loader:
            train_step(model, optimizer, batch)
    stats = loader.stats()["filter"]
    print(f"trained on digits 0-{DIGITS - 1}: kept {stats['kept']}, dropped {stats['dropped']} "
          f"({EPOCHS} epochs)")

    # Exact resume: a state taken after 3 batches continues with the same batches.
    first = pipeline(train)
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    state = first.get_state()
    rest = [np.asarray(b["image"]) for b in iterator]
    again = pipeline(train)
    again.set_state(state)
    same = all(np.array_equal(a, np.asarray(b["image"])) for a, b in zip(rest, again, strict=True))
    print(f"resumed batches identical: {same}")

    # Padded evaluation: full batches only, "valid" False on the padding rows.
    compiles = []

    @nnx.jit
    def eval_step(model: Classifier, batch: Any) -> Any:
        compiles.append(1)  # runs once per compile (trace)
        hit = (model(batch["image"]).argmax(-1) == batch["label"]) & batch["valid"]
        return hit.sum(), batch["valid"].sum()

    hits = seen = 0
    shapes = set()
    for batch in pipeline(test, pad_remainder=True):
        shapes.add(batch["image"].shape)
        h, s = eval_step(model, batch)
        hits, seen = hits + int(h), seen + int(s)
    expected = int((test["label"] < DIGITS).sum())
    print(f"eval batch shapes: {sorted(shapes)}")
    print(f"evaluated {seen} records of {expected}, eval compiles: {len(compiles)}")
    print(f"accuracy above 0.9: {hits / seen > 0.9}")


if __name__ == "__main__":
    main()
