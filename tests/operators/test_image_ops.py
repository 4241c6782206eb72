"""Image operators: values against numpy / PIL / colorsys references, per-record key
invariance across batch sizes and shuffle orders, exact resume, and errors."""

from __future__ import annotations

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from datarax.core.errors import ConfigError, DataraxError
from datarax.core.keys import record_keys
from datarax.operators import CompositeOperatorConfig, CompositeOperatorModule
from datarax.operators import ProbabilisticOperator, image as I
from datarax.operators.image import geometry as G
from datarax.operators.image._base import materialized
from datarax.operators.image.rand_augment import OPERATION_NAMES, operations
from datarax.testing import check_resume_exact

from operator_helpers import assert_key_invariant, images, pipeline

RNG = np.random.default_rng(42)
FLOAT = RNG.random((2, 6, 6, 3)).astype(np.float32)
UINT8 = RNG.integers(0, 256, (2, 6, 6, 3), dtype=np.uint8)


def run(op, batch, keys=None):
    """``op`` over ``batch`` as one compiled program, as a pipeline's step runs it (one
    compile instead of one per operation run eagerly)."""
    apply = jax.jit(lambda images, k: op.apply_batch({"image": images}, k)["image"])
    return np.asarray(apply(jnp.asarray(batch), keys))


def keys_for(n, seed=0):
    return jax.random.split(jax.random.key(seed), n)


def bilinear(image, y0, x0, h, w, out_h, out_w):
    """Half-pixel bilinear sampling of a box of ``image``, clamped to the box (numpy)."""
    ys = np.clip(y0 + (np.arange(out_h) + 0.5) * h / out_h - 0.5, y0, y0 + h - 1)
    xs = np.clip(x0 + (np.arange(out_w) + 0.5) * w / out_w - 0.5, x0, x0 + w - 1)
    y_lo, x_lo = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y_hi, x_hi = np.minimum(y_lo + 1, y0 + h - 1), np.minimum(x_lo + 1, x0 + w - 1)
    fy, fx = (ys - y_lo)[:, None, None], (xs - x_lo)[None, :, None]
    top = image[y_lo][:, x_lo] * (1 - fx) + image[y_lo][:, x_hi] * fx
    bottom = image[y_hi][:, x_lo] * (1 - fx) + image[y_hi][:, x_hi] * fx
    return top * (1 - fy) + bottom * fy


# -- values ------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(3, 3), (4, 9), (12, 10)])
def test_resize_matches_pil_bilinear(size):
    out = run(I.Resize(size), FLOAT)
    assert out.shape == (2, *size, 3)
    for c in range(3):
        pil = np.asarray(Image.fromarray(FLOAT[0, ..., c], mode="F").resize(size[::-1], Image.BILINEAR))
        np.testing.assert_allclose(out[0, ..., c], pil, atol=2e-6)


def test_resize_uint8_rounds_the_float_result():
    out = run(I.Resize((3, 3)), UINT8)
    ref = np.clip(np.round(run(I.Resize((3, 3)), UINT8.astype(np.float32))), 0, 255)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, ref.astype(np.uint8))


def test_crop_fixed_and_center_offsets_are_numpy_slices():
    np.testing.assert_array_equal(run(I.Crop((2, 3), offset=(1, 2)), UINT8), UINT8[:, 1:3, 2:5])
    np.testing.assert_array_equal(run(I.Crop(4, offset="center"), UINT8), UINT8[:, 1:5, 1:5])


def test_random_crop_takes_a_window_of_its_own_record_at_varied_offsets():
    data = images(16, size=8)
    out = run(I.RandomCrop(3), data, keys_for(16))
    offsets = set()
    for record, crop in zip(data, out):
        found = [(y, x) for y in range(6) for x in range(6)
                 if np.array_equal(record[y:y + 3, x:x + 3], crop)]
        assert found, "crop is not a window of its record"
        offsets.add(found[0])
    assert len(offsets) >= 8


def test_resized_crop_is_bilinear_sampling_of_the_box():
    op = I.ResizedCrop((4, 5), box=(1, 0, 4, 6), antialias=False)
    out = run(op, FLOAT)
    for i in range(2):
        np.testing.assert_allclose(out[i], bilinear(FLOAT[i], 1, 0, 4, 6, 4, 5), atol=1e-5)


def test_resized_crop_of_the_whole_image_equals_resize():
    np.testing.assert_allclose(run(I.ResizedCrop(3, box=(0, 0, 6, 6)), FLOAT),
                               run(I.Resize(3), FLOAT), atol=1e-6)


def test_resized_crop_antialiased_matches_pil_on_the_cut_out_box():
    out = run(I.ResizedCrop((3, 4), box=(1, 0, 5, 6)), FLOAT)
    for c in range(3):
        box = Image.fromarray(np.ascontiguousarray(FLOAT[0, 1:6, 0:6, c]), mode="F")
        pil = np.asarray(box.resize((4, 3), Image.BILINEAR))
        np.testing.assert_allclose(out[0, ..., c], pil, atol=2e-6)


@pytest.mark.parametrize("size,out,antialias", [(96, 64, True), (96, 64, False), (40, 64, True),
                                                (12, 5, True), (7, 7, True)])
def test_sparse_taps_hold_every_nonzero_dense_weight(size, out, antialias):
    count = G.tap_count(size, out, antialias)
    rng = np.random.default_rng(size * out)
    for _ in range(40):  # random boxes, including ones at the image's edges
        length = int(rng.integers(1, size + 1))
        start = int(rng.choice([0, size - length, rng.integers(0, size - length + 1)]))
        dense = np.asarray(G.resize_weights(start, length, out, size, antialias))
        index, weights = (np.asarray(a) for a in
                          G.resize_taps(start, length, out, size, antialias, count))
        assert (index >= 0).all() and (index < size).all()
        rebuilt = np.zeros_like(dense)
        np.add.at(rebuilt, (np.arange(out)[:, None], index), weights)
        np.testing.assert_allclose(rebuilt, dense, atol=1e-6)


@pytest.mark.slow
def test_crop_resize_sparse_and_dense_forms_agree_with_pil():
    big = RNG.random((1, 40, 36, 3)).astype(np.float32)
    # 40 -> 2 rows is a 20-pixel-wide filter: past MAX_SPARSE_TAPS, the dense form runs.
    assert G.tap_count(40, 2, True) > G.MAX_SPARSE_TAPS >= G.tap_count(36, 9, True)
    for size, box in (((2, 9), (0, 0, 40, 36)), ((5, 9), (3, 2, 30, 33))):
        out = run(I.ResizedCrop(size, box=box), big)
        y, x, h, w = box
        for c in range(3):
            cut = Image.fromarray(np.ascontiguousarray(big[0, y:y + h, x:x + w, c]), mode="F")
            pil = np.asarray(cut.resize(size[::-1], Image.BILINEAR))
            np.testing.assert_allclose(out[0, ..., c], pil, atol=2e-6)


def test_resized_crop_of_uint8_rounds_the_float_result():
    data = images(3, size=12)
    op = I.ResizedCrop((5, 7), box=(1, 2, 10, 9))
    ref = np.clip(np.round(run(op, data.astype(np.float32))), 0, 255).astype(np.uint8)
    out = run(op, data)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, ref)


def test_materialized_passes_values_through_unchanged():
    values = jnp.asarray(RNG.standard_normal((3, 4, 5, 2)).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(jax.jit(materialized)(values)), np.asarray(values))
    np.testing.assert_array_equal(np.asarray(jax.jit(materialized)(-values)), -np.asarray(values))
    ints = jnp.arange(12, dtype=jnp.uint8).reshape(1, 2, 2, 3)
    assert np.asarray(materialized(ints)).tolist() == np.asarray(ints).tolist()


@pytest.mark.slow  # ~6 s; the plain operator's box and values are checked by default
def test_random_resized_crop_inside_a_per_record_wrapper_matches_the_plain_operator():
    data = RNG.random((16, 12, 12, 3)).astype(np.float32)
    keys = keys_for(16)
    plain = run(I.RandomResizedCrop(12), data, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    wrapped = ProbabilisticOperator(I.RandomResizedCrop(12), probability=0.5)
    out = np.asarray(jax.jit(lambda d, k: wrapped.apply_batch({"image": d}, k)["image"])(
        jnp.asarray(data), keys))
    cropped = [np.allclose(o, p, atol=1e-6) for o, p in zip(out, plain)]
    kept = [np.array_equal(o, d) for o, d in zip(out, data)]
    assert all(c or k for c, k in zip(cropped, kept)) and 0 < sum(cropped) < 16


@pytest.mark.slow  # many boxes through a pipeline: ~8 s
def test_random_resized_crop_box_respects_scale_and_ratio_and_values_follow_box():
    op = I.RandomResizedCrop(8, scale=(0.25, 0.5), ratio=(0.5, 2.0), antialias=False)
    keys = keys_for(200)
    boxes = np.stack([np.asarray(v) for v in jax.vmap(lambda k: op.box(k, 32, 32))(keys)], axis=1)
    y, x, h, w = boxes.T
    assert (y >= 0).all() and (x >= 0).all() and (y + h <= 32).all() and (x + w <= 32).all()
    area = h * w / 1024
    assert area.min() >= 0.2 and area.max() <= 0.56  # rounding of h and w
    assert (w / h).min() >= 0.4 and (w / h).max() <= 2.5
    assert len({tuple(b) for b in boxes}) > 150
    big = RNG.random((3, 32, 32, 3)).astype(np.float32)
    out = run(op, big, keys[:3])
    for i in range(3):
        np.testing.assert_allclose(out[i], bilinear(big[i], *boxes[i], 8, 8), atol=1e-5)


def test_flips_match_numpy_and_probability_is_per_record():
    np.testing.assert_array_equal(run(I.HorizontalFlip(1.0), UINT8), UINT8[:, :, ::-1])
    np.testing.assert_array_equal(run(I.VerticalFlip(1.0), UINT8), UINT8[:, ::-1])
    np.testing.assert_array_equal(run(I.HorizontalFlip(0.0), UINT8), UINT8)
    data = images(400, size=4)
    out = run(I.HorizontalFlip(0.3), data, keys_for(400))
    flipped = np.array([np.array_equal(o, d[:, ::-1]) and not np.array_equal(o, d)
                        for o, d in zip(out, data)])
    kept = np.array([np.array_equal(o, d) for o, d in zip(out, data)])
    assert (flipped | kept).all()
    assert 0.22 < flipped.mean() < 0.38


def test_rotate_90_is_numpy_rot90_inside_the_border():
    square = RNG.random((1, 7, 7, 2)).astype(np.float32)
    out = run(I.Rotate(90.0), square)
    np.testing.assert_allclose(out[0, 1:-1, 1:-1], np.rot90(square[0], 1)[1:-1, 1:-1], atol=1e-5)
    np.testing.assert_allclose(run(I.Rotate(0.0), square), square, atol=1e-6)


def test_translate_shifts_and_fills():
    out = run(I.Translate(dy=2, dx=-1, fill=7), UINT8)
    ref = np.full_like(UINT8, 7)
    ref[:, 2:, :-1] = UINT8[:, :-2, 1:]
    np.testing.assert_array_equal(out, ref)


def test_brightness_and_contrast_match_numpy_for_float_and_uint8():
    np.testing.assert_allclose(run(I.Brightness(0.1), FLOAT), FLOAT + 0.1, atol=1e-6)
    ref = np.clip(np.round((UINT8 / 255.0 + 0.1) * 255), 0, 255)
    assert np.abs(run(I.Brightness(0.1), UINT8).astype(int) - ref).max() <= 1
    mean = FLOAT.mean(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(run(I.Contrast(1.5), FLOAT), (FLOAT - mean) * 1.5 + mean, atol=1e-5)


def test_brightness_contrast_and_flips_are_dm_pix_bit_for_bit():
    # written out in datarax (a crop / flip / colour chain imports no dm-pix): the values
    # of dm-pix's functions, exactly, record by record as a pipeline's step runs them
    pix = pytest.importorskip("dm_pix")
    data = RNG.random((8, 5, 7, 3)).astype(np.float32)

    def dm_pix(fn, *amount):
        return np.asarray(jax.jit(jax.vmap(lambda x: fn(x, *amount)))(data))

    for delta in (-0.37, 0.1, 0.29):
        np.testing.assert_array_equal(run(I.Brightness(delta), data),
                                      dm_pix(pix.adjust_brightness, delta))
    for factor in (0.0, 0.61, 1.37):
        np.testing.assert_array_equal(run(I.Contrast(factor), data),
                                      dm_pix(pix.adjust_contrast, factor))
    np.testing.assert_array_equal(run(I.HorizontalFlip(1.0), data), dm_pix(pix.flip_left_right))
    np.testing.assert_array_equal(run(I.VerticalFlip(1.0), data), dm_pix(pix.flip_up_down))


@pytest.mark.parametrize("op,change", [
    (I.Saturation(0.5), lambda h, s, v: (h, min(s * 0.5, 1.0), v)),
    (I.Hue(0.2), lambda h, s, v: ((h + 0.2) % 1.0, s, v)),
])
def test_saturation_and_hue_match_colorsys(op, change):
    out = run(op, FLOAT)
    ref = np.array([colorsys.hsv_to_rgb(*change(*colorsys.rgb_to_hsv(*px)))
                    for px in FLOAT.reshape(-1, 3)]).reshape(FLOAT.shape)
    np.testing.assert_allclose(out, ref, atol=1e-5)


def test_grayscale_is_rec601_luma_in_every_channel():
    luma = FLOAT @ np.array([0.299, 0.587, 0.114], np.float32)
    out = run(I.Grayscale(), FLOAT)
    for c in range(3):
        np.testing.assert_allclose(out[..., c], luma, atol=1e-3)


def test_gaussian_blur_matches_numpy_convolution_with_zero_padding():
    sigma, size = 1.2, 5
    taps = np.exp(-0.5 * (np.arange(size) - size // 2) ** 2 / sigma**2)
    taps /= taps.sum()
    padded = np.pad(FLOAT, ((0, 0), (2, 2), (2, 2), (0, 0)))
    rows = sum(taps[i] * padded[:, i:i + 6] for i in range(size))
    ref = sum(taps[j] * rows[:, :, j:j + 6] for j in range(size))
    np.testing.assert_allclose(run(I.GaussianBlur(sigma, kernel_size=size), FLOAT), ref, atol=1e-5)


def test_normalize_matches_numpy():
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    np.testing.assert_allclose(run(I.Normalize(mean, std), UINT8),
                               (UINT8 / 255.0 - mean) / std, atol=1e-5)


def test_normalize_refuses_a_0_255_mean_for_uint8_images_and_takes_it_for_floats():
    """uint8 images are divided by 255 first: ImageNet's mean in 0..255 levels would make
    every value about -2; float images are normalised as they are, whatever their range."""
    mean, std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
    with pytest.raises(ConfigError, match=r"mean \[123.675, 116.28, 103.53\] for the uint8 images "
                                          r"of field 'image'.* \(123.675 -> 0.485\)"):
        run(I.Normalize(mean, std), UINT8)
    levels = UINT8.astype(np.float32)
    np.testing.assert_allclose(run(I.Normalize(mean, std), levels),
                               (levels - mean) / np.asarray(std), rtol=1e-5, atol=1e-5)


def test_gaussian_noise_has_the_requested_spread():
    flat = np.full((8, 16, 16, 3), 0.5, np.float32)
    noise = run(I.GaussianNoise(0.1), flat, keys_for(8)) - 0.5
    assert abs(noise.std() - 0.1) < 0.01 and abs(noise.mean()) < 0.01
    assert not np.array_equal(noise[0], noise[1])


def test_salt_pepper_sets_the_requested_share_of_pixels():
    flat = np.full((8, 32, 32, 3), 0.5, np.float32)
    out = run(I.SaltPepperNoise(0.2), flat, keys_for(8))
    assert set(np.unique(out)) <= {0.0, 0.5, 1.0}
    assert abs((out[..., 0] == 0).mean() - 0.1) < 0.02
    assert abs((out[..., 0] == 1).mean() - 0.1) < 0.02
    assert (out.min(axis=-1) == out.max(axis=-1)).all()  # whole pixels, all channels


def test_cutout_fixed_box_and_random_box_size():
    out = run(I.Cutout((2, 3), offset=(1, 2), fill=9), UINT8)
    ref = UINT8.copy()
    ref[:, 1:3, 2:5] = 9
    np.testing.assert_array_equal(out, ref)
    ones = np.ones((50, 10, 10, 1), np.float32)
    rand = run(I.Cutout(4), ones, keys_for(50))
    erased = (rand == 0).sum(axis=(1, 2, 3))
    assert erased.max() == 16 and erased.min() >= 4  # clipped at the edges
    assert len({tuple(np.argwhere(r[..., 0] == 0)[0]) for r in rand}) > 10


def test_patch_dropout_drops_whole_patches_at_the_rate():
    ones = np.ones((40, 8, 8, 1), np.float32)
    out = run(I.PatchDropout(2, rate=0.25), ones, keys_for(40))[..., 0]
    patches = out.reshape(40, 4, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(40, 16, 4)
    assert (patches.min(axis=-1) == patches.max(axis=-1)).all()
    assert abs((patches[..., 0] == 0).mean() - 0.25) < 0.06


@pytest.mark.slow
def test_rand_augment_applies_one_listed_operation_per_step():
    assert len(OPERATION_NAMES) == 12
    np.testing.assert_array_equal(run(I.RandAugment(0, 9), UINT8, keys_for(2)), UINT8)
    data = FLOAT
    out = run(I.RandAugment(1, 15), data, keys_for(2))
    every = jax.jit(lambda im: jnp.stack(
        [fn(im, 0.5, s) for _, fn in operations(0.0) for s in (1.0, -1.0)]))
    for i in range(2):
        candidates = np.asarray(every(jnp.asarray(data[i])))
        assert any(np.allclose(out[i], c, atol=1e-5) for c in candidates)


# -- keys, pipelines, resume -------------------------------------------------------------
STOCHASTIC = {
    "RandomCrop": lambda: I.RandomCrop(5),
    "RandomResizedCrop": lambda: I.RandomResizedCrop(6),
    "HorizontalFlip": lambda: I.HorizontalFlip(0.5),
    "VerticalFlip": lambda: I.VerticalFlip(0.5),
    "Rotate": lambda: I.Rotate((-30.0, 30.0)),
    "Translate": lambda: I.Translate((-2, 2), (-2, 2)),
    "Brightness": lambda: I.Brightness((-0.3, 0.3)),
    "Contrast": lambda: I.Contrast((0.5, 1.5)),
    "Saturation": lambda: I.Saturation((0.5, 1.5)),
    "Hue": lambda: I.Hue((-0.2, 0.2)),
    "GaussianBlur": lambda: I.GaussianBlur((0.5, 2.0), kernel_size=3),
    "GaussianNoise": lambda: I.GaussianNoise((0.0, 0.2)),
    "SaltPepperNoise": lambda: I.SaltPepperNoise(0.2),
    "Cutout": lambda: I.Cutout(3),
    "PatchDropout": lambda: I.PatchDropout(2, 0.3),
    "RandAugment": lambda: I.RandAugment(2, (5.0, 15.0)),
}


HEAVY = {"RandAugment", "RandomResizedCrop"}  # compile-heavy: slow run only


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in sorted(STOCHASTIC)
])
def test_stochastic_ops_are_per_record_and_invariant_to_batching_and_order(name):
    data = images(12, size=8)
    keys = record_keys(jax.random.key(3), 0, jnp.arange(12))
    apply = jax.jit(lambda d, k: STOCHASTIC[name]().apply_batch({"image": d}, k)["image"])
    whole = np.asarray(apply(data, keys))
    order = np.array([5, 2, 11, 0, 7, 3, 9, 1, 10, 4, 8, 6])
    for size in (4,):  # another batch size and order: the same record, the same output
        parts = [np.asarray(apply(data[order[i:i + size]], keys[order[i:i + size]]))
                 for i in range(0, 12, size)]
        np.testing.assert_array_equal(np.concatenate(parts), whole[order])
    same_image = np.asarray(apply(np.repeat(data[:1], 12, axis=0), keys))
    assert len({o.tobytes() for o in same_image}) > 1, f"{name}: one draw for every record"


@pytest.mark.slow
def test_a_chain_in_a_pipeline_gives_each_record_the_same_output_at_any_batching():
    data = {"image": images(12, size=8), "id": np.arange(12, dtype=np.int32)}
    assert_key_invariant(
        lambda: CompositeOperatorModule(
            CompositeOperatorConfig(),
            operators=[I.RandomResizedCrop(6), I.HorizontalFlip(), I.Brightness((-0.2, 0.2))]),
        data,
    )


def test_chain_resumes_exactly_through_a_pipeline():
    data = {"image": images(14, size=8), "id": np.arange(14, dtype=np.int32)}
    chain = lambda: [I.RandomResizedCrop(6), I.HorizontalFlip(), I.Brightness((-0.2, 0.2)),
                     I.Contrast((0.8, 1.2)), I.Normalize([0.5] * 3, [0.25] * 3)]
    report = check_resume_exact(lambda: pipeline(chain(), data, batch_size=4),
                                [1, 2, 4, 4, 6], num_epochs=2)
    assert report.num_batches == 8 and report.num_records == 28


def test_epochs_draw_differently():
    data = {"image": images(6, size=8), "id": np.arange(6, dtype=np.int32)}
    p = pipeline([I.Brightness((-0.3, 0.3))], data, batch_size=6)
    first, second = [np.asarray(b["image"]) for _, b in zip(range(2), (next(iter(p)) for _ in range(2)))]
    assert not np.array_equal(first, second)


# -- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: I.Brightness("a"), "Brightness: delta must be a number (fixed) or a (low, high) pair "
                                "(drawn per record), got 'a'."),
    (lambda: I.Contrast((1.5, 0.5)), "Contrast: factor range (1.5, 0.5) has low > high."),
    (lambda: I.Hue(0.7), "Hue: delta must lie in [-0.5, 0.5], got 0.7."),
    (lambda: I.HorizontalFlip(1.5), "HorizontalFlip: probability must lie in [0.0, 1.0], got 1.5."),
    (lambda: I.HorizontalFlip("0.5"), "HorizontalFlip: probability must be one number in [0, 1], "
                                      "got '0.5'."),
    (lambda: I.VerticalFlip((0.2, 0.8)), "VerticalFlip: probability must be one number in [0, 1], "
                                         "got (0.2, 0.8)."),
    (lambda: I.Contrast(-1.0), "Contrast: factor must be >= 0.0, got -1.0."),
    (lambda: I.GaussianNoise((-0.1, 0.1)), "GaussianNoise: std must be >= 0.0, got (-0.1, 0.1)."),
    (lambda: I.Resize(0), "Resize: size must be an int >= 1 or a (height, width) pair, got 0."),
    (lambda: I.Resize(4, method="area"), "Resize: method must be one of ['nearest', 'linear', "
                                          "'bilinear', 'cubic', 'bicubic', 'lanczos3'], got 'area'."),
    (lambda: I.Crop(2, offset="left"),
     "Crop: offset must be 'random', 'center' or (y, x) ints >= 0, got 'left'."),
    (lambda: I.GaussianBlur(1.0, kernel_size=4), "GaussianBlur: kernel_size must be an odd int >= 1, got 4."),
    (lambda: I.Normalize([0.5, 0.5], [0.2]), "Normalize: mean has 2 values but std has 1."),
    (lambda: I.Normalize([0.5], [0.0]), "Normalize: every std must be > 0, got [0.0]."),
    (lambda: I.Normalize([], []), "Normalize: mean and std need at least one value (one per "
                                  "channel, or one for all), got [], []."),
    (lambda: I.RandAugment(2, 31), "RandAugment: magnitude must lie in [0.0, 30.0], got 31."),
    (lambda: I.ResizedCrop(4, box=(0, 0, 0, 4)), "ResizedCrop: box must be (y, x, height, width) "
     "ints with y, x >= 0 and height, width >= 1, got (0, 0, 0, 4)."),
    (lambda: I.Brightness(float("nan")), "Brightness: delta must be finite, got nan."),
    (lambda: I.Rotate((0.0, float("inf"))), "Rotate: degrees must be finite, got (0.0, inf)."),
    (lambda: I.Cutout(2, fill="white"), "Cutout: fill must be a finite number, got 'white'."),
    (lambda: I.Rotate(10.0, fill=None), "Rotate: fill must be a finite number, got None."),
    (lambda: I.RandAugment(fill=float("nan")), "RandAugment: fill must be a finite number, got nan."),
    (lambda: I.RandAugment(fill=128), "RandAugment: fill is on the [0, 1] scale its operations "
     "work on, for uint8 images too; got 128. For a uint8 level give level / 255 (128 -> 0.502)."),
])
def test_construction_errors(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value) == message


def test_missing_field_is_named_at_the_first_batch_with_the_fields_present():
    data = {"pixels": images(4), "id": np.arange(4, dtype=np.int32)}
    p = pipeline([I.HorizontalFlip(1.0)], data, batch_size=2)
    with pytest.raises(DataraxError) as err:
        next(iter(p))
    assert str(err.value) == (
        "HorizontalFlip 'HorizontalFlip': field(s) ['image'] not in the batch; the batch has "
        "fields ['id', 'pixels']. Point the operator at one of those."
    )


def test_wrong_rank_and_too_large_crop_are_refused():
    with pytest.raises(DataraxError) as err:
        I.Brightness(0.1).apply_batch({"image": jnp.zeros((2, 4, 4))}, None)
    assert str(err.value) == (
        "Brightness 'Brightness': field 'image' must hold (batch, height, width, channels) "
        "images, got shape (2, 4, 4). One-channel images stored as (batch, height, width) need "
        "a channel axis: add MapOperator(subtree='image', fn=lambda a: a[..., None]) before it; "
        "one image called directly needs a batch axis, image[None].")
    with pytest.raises(ConfigError) as err:
        I.Crop(8, offset="center").apply_batch({"image": jnp.zeros((1, 4, 4, 1))}, None)
    assert str(err.value) == ("Crop 'Crop': crop size (8, 8) is larger than the images (4, 4) "
                              "of field 'image'; give a size of at most (4, 4), or put a "
                              "Resize stage before it.")
    with pytest.raises(ConfigError) as err:  # a fixed offset is not moved back inside
        I.Crop(2, offset=(3, 1)).apply_batch({"image": jnp.zeros((1, 4, 4, 1))}, None)
    assert str(err.value) == ("Crop 'Crop': crop (2, 2) at offset (3, 1) reaches past the "
                              "images (4, 4); keep y + height and x + width within them.")
    with pytest.raises(ConfigError) as err:
        I.ResizedCrop(2, box=(1, 0, 4, 4)).apply_batch({"image": jnp.zeros((1, 4, 4, 1))}, None)
    assert str(err.value) == ("ResizedCrop 'ResizedCrop': box (1, 0, 4, 4) reaches past the "
                              "images (4, 4); keep y + height and x + width within them.")
    with pytest.raises(ConfigError) as err:  # a fixed box outside the images fills nothing
        I.Cutout(2, offset=(4, 0)).apply_batch({"image": jnp.zeros((1, 4, 4, 1))}, None)
    assert str(err.value) == ("Cutout 'Cutout': box (2, 2) at offset (4, 0) misses the images "
                              "(4, 4), so it would fill nothing; give an offset whose box "
                              "overlaps them (a box past an edge is clipped).")
    clipped = I.Cutout(2, offset=(-1, 3)).apply_batch({"image": jnp.ones((1, 4, 4, 1))}, None)
    assert np.asarray(clipped["image"])[0, :, :, 0].tolist() == [
        [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]


@pytest.mark.slow  # every image operator through a resume: ~8 s
def test_every_other_image_op_resumes_exactly_through_a_pipeline():
    data = {"image": images(10, size=8), "id": np.arange(10, dtype=np.int32)}
    chain = lambda: [
        I.Rotate((-20.0, 20.0)), I.Translate((-1, 1), (-1, 1)), I.Saturation((0.5, 1.5)),
        I.Hue((-0.1, 0.1)), I.GaussianBlur((0.5, 1.5), kernel_size=3), I.GaussianNoise(0.05),
        I.SaltPepperNoise(0.05), I.Cutout(2), I.PatchDropout(2, 0.2), I.VerticalFlip(0.5),
        I.RandomCrop(7), I.Grayscale(), I.Resize(6), I.Crop(4, offset="center"),
    ]
    report = check_resume_exact(lambda: pipeline(chain(), data, batch_size=4), [1, 2, 2, 4],
                                num_epochs=2)
    assert report.num_batches == 6 and report.num_records == 20


@pytest.mark.slow
def test_rand_augment_resumes_exactly_through_a_pipeline():
    data = {"image": images(10, size=8), "id": np.arange(10, dtype=np.int32)}
    report = check_resume_exact(
        lambda: pipeline([I.RandAugment(2, (5.0, 15.0))], data, batch_size=4), [1, 3],
        num_epochs=2)
    assert report.num_batches == 6


def test_rand_augment_keeps_float16_images_float16():
    image = jnp.asarray(FLOAT[:1, :5], jnp.float16)  # 5 x 6: odd height
    op = I.RandAugment(1)
    out = jax.jit(lambda k: op.apply_batch({"image": image}, k)["image"])(keys_for(1))
    assert out.dtype == jnp.float16 and out.shape == (1, 5, 6, 3)


def test_fill_is_on_the_image_scale_rounded_and_clipped_and_rand_augment_fill_is_unit():
    image = jnp.full((1, 2, 3, 1), 50, jnp.uint8)
    for fill, expected in [(127.6, 128), (-1, 0), (300, 255)]:
        out = run(I.Translate(dx=1, fill=fill), image)[0, :, 0, 0]
        assert out.tolist() == [expected, expected]
    # RandAugment's operations work in [0, 1]: key 90 draws translate_x right one pixel
    op = I.RandAugment(1, 30.0, fill=0.5)
    out = jax.jit(lambda k: op.apply_batch({"image": image}, k)["image"])(keys_for(1, 90))
    assert np.asarray(out)[0, ..., 0].tolist() == [[128, 50, 50], [128, 50, 50]]


def test_value_operators_refuse_integer_images_other_than_uint8_geometry_keeps_them():
    image = jnp.full((1, 2, 2, 3), 1000, jnp.uint16)
    for op in [I.Brightness(0.2), I.Normalize(0.5, 0.5), I.GaussianNoise(0.1)]:
        with pytest.raises(DataraxError) as err:
            op.apply_batch({"image": image}, keys_for(1))
        assert str(err.value) == (
            f"{type(op).__name__} '{op.name}': field 'image' holds uint16 images; it works on "
            "uint8 images (0-255) or float images in [0, 1]. Convert them first, e.g. "
            "MapOperator(subtree=[...], fn=lambda a: a / 65535.0) for 16-bit images, "
            "a.astype(jnp.float32) for masks of True/False.")
    out = I.HorizontalFlip(1.0).apply_batch({"image": image}, None)["image"]
    assert out.dtype == jnp.uint16 and out.tolist() == image.tolist()


def test_image_ops_take_numpy_ints_for_their_int_settings():
    # kernel_size / num_ops computed with NumPy are the same ints
    np.testing.assert_array_equal(run(I.GaussianBlur(1.2, kernel_size=np.int64(5)), FLOAT),
                                  run(I.GaussianBlur(1.2, kernel_size=5), FLOAT))
    np.testing.assert_array_equal(run(I.RandAugment(np.int64(0), 9), UINT8, keys_for(2)), UINT8)
    with pytest.raises(ConfigError, match="kernel_size must be an odd int >= 1, got 4."):
        I.GaussianBlur(1.2, kernel_size=np.int64(4))
    with pytest.raises(ConfigError, match="num_ops must be an int >= 0, got np.float64"):
        I.RandAugment(np.float64(2), 9)
