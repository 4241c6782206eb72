"""Operators under a user's strict JAX settings (``jax_numpy_dtype_promotion='strict'``,
``jax_numpy_rank_promotion='raise'``): datarax's own array code promotes explicitly, so
they give the values and dtypes of the default settings. The settings are set only
inside JAX's context managers here, never globally."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from datarax.core.keys import record_keys
from datarax.operators import (
    BatchMixOperator,
    CompositeOperatorConfig,
    CompositeOperatorModule,
    MapOperator,
    MapOperatorConfig,
)
from datarax.operators import image as I

RNG = np.random.default_rng(7)
FLOAT = RNG.random((2, 6, 6, 3)).astype(np.float32)
UINT8 = RNG.integers(0, 256, (2, 6, 6, 3), dtype=np.uint8)


@contextlib.contextmanager
def strict():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


@contextlib.contextmanager
def x64(strict_too: bool):
    with jax.enable_x64(True), (strict() if strict_too else contextlib.nullcontext()):
        yield


def run(op, images, keys=None):
    apply = jax.jit(lambda batch, k: op.apply_batch({"image": batch}, k)["image"])
    return apply(jnp.asarray(images), keys)


def test_weighted_parallel_of_an_int32_field_under_strict_promotion_is_float32():
    ops = [MapOperator(MapOperatorConfig(subtree=["label"]), fn=lambda a: a + 1, name="add1"),
           MapOperator(MapOperatorConfig(subtree=["label"]), fn=lambda a: a * 3, name="mul3")]
    op = CompositeOperatorModule(
        CompositeOperatorConfig(strategy="weighted_parallel", weights=(0.5, 0.25)), operators=ops)
    with strict():
        out = op.apply_batch({"label": jnp.array([1, 2, 3], jnp.int32)}, None)["label"]
    assert out.dtype == jnp.float32 and not out.weak_type
    np.testing.assert_array_equal(out, [1.75, 3.0, 4.25])  # 0.5 (x + 1) + 0.25 (3 x)


def test_resized_crop_under_strict_promotion_gives_the_default_values():
    op = I.ResizedCrop((3, 4), box=(1, 0, 5, 6))
    expected = np.asarray(run(op, FLOAT))
    with strict():
        out = run(op, FLOAT)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, expected)


def test_normalize_under_strict_promotion_broadcasts_per_channel_in_float32():
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    with strict():
        out = run(I.Normalize(mean, std), UINT8)
        half = run(I.Normalize(mean, std), FLOAT.astype(np.float16))
    assert out.dtype == jnp.float32 and half.dtype == jnp.float32  # as the default rules give
    np.testing.assert_allclose(out, (UINT8 / 255.0 - mean) / std, atol=1e-5)
    np.testing.assert_allclose(half, (FLOAT.astype(np.float16) - np.float32(mean)) / std,
                               atol=1e-5)


def test_dm_pix_operators_under_strict_promotion_give_the_default_values():
    for op in (I.Saturation(0.3), I.Hue(0.2)):
        expected = np.asarray(run(op, UINT8))
        with strict():
            out = run(op, UINT8)
        assert out.dtype == jnp.uint8
        np.testing.assert_array_equal(out, expected)


def test_box_shift_and_noise_operators_under_x64_and_strict_promotion_give_the_x64_values():
    # their aranges and uniform draws are int64 / float64 under x64, the boxes int32
    keys = record_keys(jax.random.key(0), 0, jnp.arange(2))
    ops = [I.Translate(dy=(-2.0, 2.0), dx=(-2.0, 2.0)), I.Cutout(3), I.SaltPepperNoise(0.3),
           I.PatchDropout(2, rate=0.5)]
    for op in ops:
        with x64(strict_too=False):
            expected = np.asarray(run(op, FLOAT, keys))
        with x64(strict_too=True):
            out = np.asarray(run(op, FLOAT, keys))
        np.testing.assert_array_equal(out, expected, err_msg=type(op).__name__)
    data = {"image": FLOAT[:2], "label": np.arange(2, dtype=np.int32)}
    cutmix = BatchMixOperator(mode="cutmix", alpha=1.0, num_classes=2)
    with x64(strict_too=False):
        expected = cutmix.apply_batch(data, keys)
    with x64(strict_too=True):
        out = cutmix.apply_batch(data, keys)
    for field in ("image", "label"):
        np.testing.assert_array_equal(np.asarray(out[field]), np.asarray(expected[field]))
