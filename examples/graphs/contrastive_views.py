"""Contrastive learning input: two augmented views of every record, merged as one batch.

A graph of named nodes (``Pipeline.from_dag``) runs inside the one compiled step: the
two ``view`` nodes apply the same augmentation to the same record, each with its own
per-record key, and ``Merge`` joins them with the label into one batch. The views are
the same at any batch size and after a resume.
"""

import jax
import numpy as np
from flax import nnx

from datarax.dag import Merge, SelectFields
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def augment(element, key):
    """Random brightness and a random horizontal flip of one (8, 8) image."""
    k_bright, k_flip = jax.random.split(key)
    image = element.data["image"] * jax.random.uniform(k_bright, (), minval=0.6, maxval=1.4)
    image = jax.numpy.where(jax.random.bernoulli(k_flip), image[:, ::-1], image)
    return element.replace_data({"image": image})  # the view alone; "target" brings the label


def build(batch_size: int) -> Pipeline:
    rng = np.random.default_rng(0)
    data = {
        "image": rng.random((64, 8, 8), dtype=np.float32),
        "label": np.arange(64, dtype=np.int32) % 4,
    }
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), data)
    view = lambda: ElementOperator(ElementOperatorConfig(stochastic=True), fn=augment)  # noqa: E731
    return Pipeline.from_dag(
        source=source,
        nodes={"view1": view(), "view2": view(), "target": SelectFields("label"), "pair": Merge()},
        edges={
            "view1": ["source"],
            "view2": ["source"],
            "target": ["source"],
            "pair": ["view1", "view2", "target"],
        },
        sink="pair",
        batch_size=batch_size,
        rngs=nnx.Rngs(0),
    )


if __name__ == "__main__":
    pipeline = build(batch_size=16)
    batch = next(iter(pipeline))
    print("fields:", sorted(batch), batch["view1_image"].shape)
    differ = float(np.abs(np.asarray(batch["view1_image"]) - np.asarray(batch["view2_image"])).mean())
    print(f"mean |view1 - view2|: {differ:.3f}")
    assert differ > 0

    # The same records at another batch size get exactly the same two views.
    whole = [jax.tree.map(np.asarray, b) for b in build(batch_size=16)]
    halves = [jax.tree.map(np.asarray, b) for b in build(batch_size=8)]
    same = all(
        np.array_equal(np.concatenate([b[f] for b in whole]), np.concatenate([b[f] for b in halves]))
        for f in whole[0]
    )
    print("views identical at batch size 16 and 8:", same)
    assert same

    # A fresh pipeline restored from a state saved after two batches serves the same views.
    iterator = iter(build(batch_size=16))
    next(iterator), next(iterator)
    state = iterator.get_state()
    resumed = build(batch_size=16)
    resumed.set_state(state)
    rest = [jax.tree.map(np.asarray, b) for b in resumed]
    same = len(rest) == len(whole) - 2 and all(
        np.array_equal(a[f], b[f]) for a, b in zip(rest, whole[2:]) for f in a
    )
    print("views identical after a resume:", same)
    assert same
