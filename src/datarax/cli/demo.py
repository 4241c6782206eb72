"""The end-to-end demo: scikit-learn's bundled digits through a datarax pipeline.

Shuffled MemorySource -> Normalize -> Translate and Cutout (per record) -> a small Flax
NNX classifier trained with Optax. Midway through epoch 2 the pipeline state is saved as
JSON; a fresh pipeline restored from it must give exactly the batches the run did.
``--scan`` trains with ``Pipeline.scan`` chunks instead of a Python loop.
"""

from __future__ import annotations

import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.core.extras import require
from datarax.operators import ProbabilisticOperator
from datarax.operators.image import Cutout, Normalize, Translate
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def load_digits_split(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Digits (1,797 8x8 images) as uint8 images + int32 labels, 80/20 split."""
    datasets = require("sklearn.datasets", extra="demo", user="datarax demo")
    digits = datasets.load_digits()
    images = (digits.images * 16).clip(0, 255).astype(np.uint8)[..., None]  # (N, 8, 8, 1)
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return (
        {"image": images[train], "label": labels[train]},
        {"image": images[test], "label": labels[test]},
    )


def conv_as_matmul(conv: nnx.Conv, x: jax.Array) -> jax.Array:
    """``conv(x)`` for a stride-1, ``SAME``-padded, ungrouped ``nnx.Conv`` over NHWC
    images, as image patches times the kernel (im2col): XLA:CPU runs a convolution's
    kernel gradient slower inside a loop body (jax-ml/jax#12868), as ``Pipeline.scan`` is.

    Example:
        >>> conv = nnx.Conv(3, 4, kernel_size=(3, 3), rngs=nnx.Rngs(0))
        >>> x = jnp.asarray(np.random.default_rng(1).random((2, 5, 5, 3)), jnp.float32)
        >>> bool(jnp.allclose(conv_as_matmul(conv, x), conv(x), atol=1e-5))
        True
    """
    def ones(value: Any) -> bool:
        return all(v == 1 for v in (value if isinstance(value, (tuple, list)) else (value,)))

    if not (conv.padding == "SAME" and ones(conv.strides) and ones(conv.input_dilation)
            and ones(conv.kernel_dilation) and conv.feature_group_count == 1):
        raise ValueError(
            "conv_as_matmul computes a stride-1, SAME-padded, undilated, ungrouped 2-D "
            f"convolution; this nnx.Conv has padding={conv.padding!r}, "
            f"strides={conv.strides!r}, input_dilation={conv.input_dilation!r}, "
            f"kernel_dilation={conv.kernel_dilation!r}, "
            f"feature_group_count={conv.feature_group_count}. Call the nnx.Conv itself."
        )
    kernel = conv.kernel[...]  # (kh, kw, in, out)
    kh, kw, channels, features = kernel.shape
    height, width = x.shape[1:3]
    # SAME at stride 1: k - 1 rows of zeros, the extra one (even k) after
    padded = jnp.pad(x, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    # the kh * kw shifted images side by side, as the HWIO kernel's rows flatten
    patches = jnp.concatenate(
        [padded[:, i:i + height, j:j + width, :] for i in range(kh) for j in range(kw)], axis=-1
    )
    out = patches @ kernel.reshape(kh * kw * channels, features)
    return out + conv.bias[...] if conv.bias is not None else out


class Classifier(nnx.Module):
    """A small convolutional classifier for 8x8 digits (convolving by :func:`conv_as_matmul`)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.hidden = nnx.Linear(16 * 8 * 8, 64, rngs=rngs)
        self.out = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(conv_as_matmul(self.conv, x))
        x = x.reshape(x.shape[0], -1)
        return self.out(nnx.relu(self.hidden(x)))


def build_classifier(seed: int) -> Classifier:
    """``Classifier(nnx.Rngs(seed))`` initialised as one compiled program (same parameters)."""
    return nnx.jit(lambda: Classifier(nnx.Rngs(seed)))()


def build_pipeline(train: dict[str, np.ndarray], batch_size: int, seed: int) -> Pipeline:
    """The training pipeline; building it twice gives identical pipelines."""
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=seed), train)
    stages = [
        Normalize(mean=[0.0], std=[1.0]),  # uint8 -> float32 in [0, 1]
        Translate(dy=(-1, 1), dx=(-1, 1)),  # per-record shift of up to one pixel
        ProbabilisticOperator(Cutout(2), probability=0.25),  # erase a 2x2 box, 1 in 4 records
    ]
    return Pipeline(
        source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(seed), drop_remainder=True
    )


def run_demo(epochs: int = 8, batch_size: int = 64, seed: int = 0, progress: bool = True,
             scan: bool = False) -> dict[str, float]:
    """Train, checkpoint mid-epoch, verify the resume, evaluate; returns the metrics.
    ``scan``: each epoch as two :meth:`~datarax.pipeline.Pipeline.scan` chunks."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 2:
        raise ConfigError(
            f"--epochs {epochs}: the demo checkpoints in epoch 1 (the second) and checks "
            "the resume against it; give --epochs 2 or more."
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(
            f"--seed {seed}: the seed of the split, the shuffle and the model is an int in "
            "[0, 2**32); give one there, e.g. --seed 0."
        )
    optax = require("optax", extra="demo", user="datarax demo")
    tqdm = require("tqdm", extra="demo", user="datarax demo").tqdm

    train, test = load_digits_split(seed)
    if len(train["label"]) // batch_size < 2:
        raise ConfigError(
            f"--batch-size {batch_size} leaves fewer than 2 batches per epoch of the "
            f"{len(train['label'])} training records, and the demo checkpoints half-way "
            f"through an epoch; give --batch-size {len(train['label']) // 2} or less."
        )
    print(f"datarax demo: digits, {len(train['label'])} train / {len(test['label'])} test records"
          + (" (Pipeline.scan)" if scan else ""))
    pipeline = build_pipeline(train, batch_size, seed)
    model = build_classifier(seed)
    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    def loss_step(model: Classifier, optimizer: nnx.Optimizer, batch: dict[str, jax.Array]) -> Any:
        def loss_fn(model: Classifier) -> jax.Array:
            logits = model(batch["image"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, batch["image"]  # the images: to check the resume against

    train_step = nnx.jit(loss_step)
    steps_per_epoch = len(train["label"]) // batch_size
    midway = steps_per_epoch // 2  # the checkpoint: after `midway` batches of epoch 1
    checkpoint: str | None = None
    after_checkpoint: list[np.ndarray] = []
    records = 0
    started = time.perf_counter()
    bar = tqdm(total=epochs * steps_per_epoch, disable=not progress, unit="batch")
    for epoch in range(epochs):
        if scan:  # two chunks per epoch, the first ending where the checkpoint is taken
            for length in (midway, steps_per_epoch - midway):
                losses, images = pipeline.scan(loss_step, length=length, modules=(model, optimizer))
                records += length * batch_size
                if epoch == 1 and checkpoint is None:
                    checkpoint = json.dumps(pipeline.get_state())
                elif epoch == 1:
                    after_checkpoint.extend(np.asarray(images))
                bar.update(length)
                bar.set_postfix(epoch=epoch, loss=f"{float(losses[-1]):.3f}")
            continue
        iterator = iter(pipeline)
        for step, batch in enumerate(iterator):
            loss, _ = train_step(model, optimizer, batch)
            records += int(batch["label"].shape[0])
            if epoch == 1 and step == midway - 1:
                checkpoint = json.dumps(iterator.get_state())
            elif checkpoint is not None and epoch == 1:
                after_checkpoint.append(np.asarray(batch["image"]))
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{float(loss):.3f}")
    bar.close()
    elapsed = time.perf_counter() - started

    assert checkpoint is not None
    resumed = iter(build_pipeline(train, batch_size, seed))
    resumed.set_state(json.loads(checkpoint))
    replay = [np.asarray(b["image"]) for b in resumed]
    exact = len(replay) == len(after_checkpoint) and all(
        np.array_equal(a, b) for a, b in zip(replay, after_checkpoint)
    )
    print(
        f"checkpoint: {len(checkpoint)} bytes of JSON at epoch 1, step {midway}; "
        f"resumed run replayed {len(replay)} batches, identical: {exact}"
    )
    if not exact:
        raise SystemExit("resume was not exact")

    logits = model(normalize_images(test["image"]))
    accuracy = float((jnp.argmax(logits, -1) == test["label"]).mean())
    rate = records / elapsed
    print(f"test accuracy: {accuracy:.3f}")
    print(f"throughput (pipeline + training step): {rate:,.0f} records/s over {epochs} epochs")
    return {"accuracy": accuracy, "records_per_s": rate, "resume_exact": float(exact)}


def normalize_images(images: np.ndarray) -> jax.Array:
    return jnp.asarray(images, jnp.float32) / 255.0
