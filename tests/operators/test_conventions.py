"""Each convention docs/operators.md writes down, held by a test (and where a
reference library does otherwise, what it does)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageEnhance

from datarax.core.errors import ConfigError, DataraxError
from datarax.operators import BatchMixOperatorConfig, BatchMixOperator
from datarax.operators import image as I
from datarax.operators.image.rand_augment import _posterize

RNG = np.random.default_rng(3)
RGB = RNG.integers(0, 256, (1, 5, 7, 3), dtype=np.uint8)


def run(op, batch, keys=None):
    return np.asarray(jax.jit(op.apply_batch)({"image": jnp.asarray(batch)}, keys)["image"])


def test_centre_crop_puts_the_odd_pixel_of_the_margin_bottom_right():
    image = np.arange(9 * 9).reshape(1, 9, 9, 1)
    out = run(I.Crop((6, 2), offset="center"), image)  # margins 3 and 7
    np.testing.assert_array_equal(out[0], image[0, 1:7, 3:5])
    # torchvision takes int(round(margin / 2)): round half to even, here 2 and 4.
    assert (int(round(3 / 2)), int(round(7 / 2))) == (2, 4)


def test_nearest_resize_takes_the_pixel_after_a_border_where_pil_takes_the_one_before():
    image = np.arange(16 * 16, dtype=np.float32).reshape(1, 16, 16, 1)
    out = run(I.Resize((7, 5), method="nearest"), image)[0, :, 0, 0] // 16
    assert out.tolist() == [1, 3, 5, 8, 10, 12, 14]  # row 3's centre, 3.5 * 16 / 7, is 8.0
    pil = np.asarray(Image.fromarray(image[0, :, :, 0], "F").resize((5, 7), Image.NEAREST))
    assert (pil[:, 0] // 16).tolist() == [1, 3, 5, 7, 10, 12, 14]


def test_bicubic_uint8_is_the_float_result_rounded_and_clipped_once():
    image = np.zeros((1, 6, 6, 1), np.uint8)
    image[0, :, 3:] = 255  # a sharp edge: the kernel overshoots past 255 and below 0
    out = run(I.Resize((12, 12), method="bicubic"), image)[0, :, :, 0].astype(int)
    floats = run(I.Resize((12, 12), method="bicubic"), image.astype(np.float32))[0, :, :, 0]
    np.testing.assert_array_equal(out, np.clip(np.round(floats), 0, 255))
    pil_f = np.asarray(Image.fromarray(image[0, :, :, 0].astype(np.float32), "F").resize(
        (12, 12), Image.BICUBIC))
    np.testing.assert_allclose(floats, pil_f, atol=1e-3)


def test_random_resized_crop_falls_back_to_torchvisions_centred_box():
    image = np.arange(4 * 6, dtype=np.uint8).reshape(1, 4, 6, 1).repeat(3, 0)
    keys = jax.random.split(jax.random.key(0), 3)  # no square box of the whole area fits
    out = run(I.RandomResizedCrop(4, scale=1.0, ratio=1.0), image, keys)
    np.testing.assert_array_equal(out, image[:, :, 1:5])  # width 4 = height, centred
    tall = run(I.RandomResizedCrop((2, 4), scale=1.0, ratio=2.0), image.transpose(0, 2, 1, 3), keys)
    np.testing.assert_array_equal(tall, image.transpose(0, 2, 1, 3)[:, 2:4])  # 4 / 2 of 6 rows, centred


def test_posterize_rounds_to_evenly_spaced_levels_where_pil_masks_bits():
    values = jnp.arange(256, dtype=jnp.float32) / 255.0
    posterize = jax.jit(_posterize)
    for bits in (1, 2, 4):
        out = np.asarray(posterize(values, jnp.float32(bits)))
        levels = np.unique(out)
        np.testing.assert_allclose(levels, np.linspace(0.0, 1.0, 2**bits), atol=1e-6)
        pil = np.asarray(Image.fromarray(np.arange(256, dtype=np.uint8).reshape(16, 16))
                         .point(lambda v: v & (0xFF << (8 - bits) & 0xFF))).ravel()
        assert pil.max() < 255  # PIL's top level is 256 - 2**(8 - bits), never white


def test_contrast_scales_around_each_channels_own_mean():
    out = run(I.Contrast(0.0), RGB.astype(np.float32) / 255.0)
    np.testing.assert_allclose(out[0], np.broadcast_to(RGB[0].mean(axis=(0, 1)) / 255.0,
                                                       RGB[0].shape), atol=1e-6)
    # PIL (and torchvision) blend toward one grey level, the mean luma: channels become equal.
    pil = np.asarray(ImageEnhance.Contrast(Image.fromarray(RGB[0])).enhance(0.0))
    assert (pil == pil[0, 0, 0]).all()


def test_saturation_zero_is_the_hsv_value_not_the_luma():
    out = run(I.Saturation(0.0), RGB.astype(np.float32) / 255.0)
    np.testing.assert_allclose(out[0], np.repeat(RGB[0].max(axis=-1, keepdims=True) / 255.0, 3,
                                                 axis=-1), atol=1e-6)


def test_blur_pads_with_zeros_so_a_flat_image_darkens_at_the_border():
    flat = np.ones((1, 7, 7, 1), np.float32)
    out = run(I.GaussianBlur(1.0, kernel_size=5), flat)[0, ..., 0]
    assert abs(out[3, 3] - 1.0) < 1e-6 and out[0, 0] < 0.6 and out[0, 3] < 0.8


def test_float_outputs_are_not_clipped_and_uint8_outputs_are():
    out = run(I.Brightness(0.5), np.full((1, 1, 1, 1), 0.8, np.float32))
    assert abs(out.item() - 1.3) < 1e-6
    assert run(I.Brightness(0.5), np.full((1, 1, 1, 1), 204, np.uint8)).item() == 255


def test_mixup_turns_integer_images_to_float32_and_cutmix_keeps_their_dtype():
    keys = jax.random.split(jax.random.key(0), 4)
    batch = {"image": jnp.asarray(RNG.integers(0, 256, (4, 6, 6, 3), dtype=np.uint8)),
             "label": jnp.arange(4)}
    def dtype(mode, images):
        op = BatchMixOperator(mode=mode, num_classes=4)
        out = jax.eval_shape(op.apply_batch, {**batch, "image": images}, keys)
        return out["image"].dtype

    assert dtype("mixup", batch["image"]) == jnp.float32
    assert dtype("cutmix", batch["image"]) == jnp.uint8
    assert dtype("mixup", batch["image"].astype(jnp.bfloat16)) == jnp.bfloat16


def test_grayscale_passes_one_channel_images_and_colour_ops_refuse_them():
    gray = RNG.integers(0, 256, (2, 5, 7, 1), dtype=np.uint8)
    np.testing.assert_array_equal(run(I.Grayscale(), gray), gray)
    with pytest.raises(DataraxError, match=r"Grayscale 'Grayscale': field 'image' holds images "
                                           r"with 2 channels; it works on RGB"):
        run(I.Grayscale(), np.zeros((1, 2, 2, 2), np.uint8))
    with pytest.raises(DataraxError, match=r"Saturation 'Saturation': field 'image' holds "
                                           r"images with 1 channel\b"):
        run(I.Saturation(0.5), gray)


def test_batch_mix_alpha_defaults_to_one():
    assert BatchMixOperator().config.alpha == 1.0 == BatchMixOperatorConfig().alpha


def test_a_config_given_where_a_setting_is_expected_is_named_as_such():
    @dataclasses.dataclass
    class BatchMixOperatorConfig:
        mode: str = "cutmix"
        alpha: float = 1.0

    with pytest.raises(ConfigError) as err:
        BatchMixOperator(mode=BatchMixOperatorConfig())
    message = str(err.value)
    assert "got a config object, BatchMixOperatorConfig(...), as its setting mode=" in message
    assert "BatchMixOperator(BatchMixOperatorConfig(mode=..., alpha=...))" in message
    assert "must be one of" not in message
    with pytest.raises(ConfigError, match="got a config object, BatchMixOperatorConfig"):
        BatchMixOperator(alpha=BatchMixOperatorConfig())
    with pytest.raises(ConfigError, match="config \\(its first argument\\) must be of type "
                                          "BatchMixOperatorConfig, got BatchMixOperatorConfig"):
        BatchMixOperator(BatchMixOperatorConfig())
