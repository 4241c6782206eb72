"""tf.data: from_tensor_slices, full shuffle, per-record map, batch, AUTOTUNE prefetch."""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf


def versions() -> dict[str, str]:
    return {"tensorflow": tf.__version__}


def _transform(image, label):
    image = tf.cast(image, tf.float32) / 255.0
    image = tf.cond(tf.random.uniform([]) < 0.5, lambda: tf.reverse(image, [1]), lambda: image)
    return image, label


def vision_epoch(images: np.ndarray, labels: np.ndarray, spec) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    tf.random.set_seed(spec.seed)
    autotune = tf.data.AUTOTUNE
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(images.shape[0], seed=spec.seed, reshuffle_each_iteration=True)
        .map(_transform, num_parallel_calls=autotune)
        .batch(spec.batch_size, num_parallel_calls=autotune)
        .prefetch(autotune)
    )
    for image, label in dataset:
        yield image.numpy(), label.numpy()
