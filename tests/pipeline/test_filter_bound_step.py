"""A filtered pass looks its step up once and, after the first call, calls the step's
executable directly (``pipeline/filtered.py``): the batches of every call are those of
the records the pass reaches, epoch after epoch, and a restore continues them exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

N, BATCH = 600, 32
IMAGES = np.random.default_rng(0).integers(0, 256, (N, 4, 4, 3), dtype=np.uint8)


def flip(el, key):
    image = el.data["image"]
    return {"image": jnp.where(jax.random.bernoulli(key), image[:, ::-1, :], image)}


def w10(prefetch: int = 2) -> Pipeline:
    """W10 in small: a shuffled source, even labels kept, /255 and a random flip."""
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                          {"image": IMAGES, "label": np.arange(N, dtype=np.int32)})
    stages = [FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0),
              ElementOperator(fn=lambda el, key=None: {"image": el.data["image"] / 255.0}),
              ElementOperator(fn=flip, stochastic=True)]
    return Pipeline(source, stages=stages, batch_size=BATCH, seed=1, prefetch=prefetch)


def host(batches) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.asarray(b["image"]), np.asarray(b["label"])) for b in batches]


@pytest.fixture(scope="module")
def three_epochs() -> list[list[tuple[np.ndarray, np.ndarray]]]:
    pipeline = w10()
    return [host(pipeline) for _ in range(3)]


def test_every_epoch_holds_each_kept_record_once_as_its_image_scaled_or_flipped(three_epochs):
    orders = []
    for epoch in three_epochs:
        labels = np.concatenate([label for _, label in epoch])
        assert sorted(labels.tolist()) == list(range(0, N, 2))
        assert [len(label) for _, label in epoch] == [BATCH] * 9 + [300 - 9 * BATCH]
        for image, label in epoch:
            plain = IMAGES[label] / 255.0
            same = np.isclose(image, plain).all(axis=(1, 2, 3))
            flipped = np.isclose(image, plain[:, :, ::-1]).all(axis=(1, 2, 3))
            assert (same | flipped).all()
        orders.append(labels.tolist())
    assert orders[0] != orders[1] != orders[2]  # a new order every epoch


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_restore_mid_epoch_continues_the_same_batches(three_epochs, prefetch):
    pipeline = w10(prefetch)
    host(pipeline)  # epoch 0
    it = iter(pipeline)
    head = host(next(it) for _ in range(4))
    state = pipeline.get_state()
    restored = w10(prefetch)
    restored.set_state(state)
    tail = host(restored)
    for (image, label), (want_image, want_label) in zip(head + tail, three_epochs[1], strict=True):
        np.testing.assert_array_equal(label, want_label)
        np.testing.assert_array_equal(image, want_image)


def test_a_batch_level_stage_after_the_filter_sees_each_batch_and_the_short_last_one():
    def centered(batch):  # a plain callable: the whole batch at once
        return {**batch, "c": batch["x"] - batch["x"].mean()}

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=2),
                          {"x": np.arange(30, dtype=np.float32)})
    pipeline = Pipeline(source, stages=[FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0),
                                        centered], batch_size=4, seed=0)
    for _ in range(2):
        batches = [(np.asarray(b["x"]), np.asarray(b["c"])) for b in pipeline]
        assert [len(x) for x, _ in batches] == [4, 4, 4, 3]
        assert sorted(np.concatenate([x for x, _ in batches]).tolist()) == list(range(0, 30, 2))
        for x, c in batches:
            np.testing.assert_allclose(c, x - x.mean(), rtol=1e-6)
