"""Image operators on the inputs users give them: (batch, H, W) grayscale, bool masks,
channel counts Normalize was not given, and settings of the wrong type."""

import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.errors import ConfigError, DataraxError
from datarax.operators import MapOperator
from datarax.operators import image as I
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def test_grayscale_without_a_channel_axis_runs_after_the_stage_the_error_suggests():
    gray = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    with pytest.raises(DataraxError, match=r"got shape \(2, 3, 5\)\. One-channel images .* "
                       r"add MapOperator\(subtree='image', fn=lambda a: a\[\.\.\., None\]\)"):
        I.HorizontalFlip(1.0).apply_batch({"image": gray}, None)
    source = MemorySource(MemorySourceConfig(), {"image": gray})
    stages = [MapOperator(subtree="image", fn=lambda a: a[..., None]), I.HorizontalFlip(1.0)]
    out = next(iter(Pipeline(source=source, stages=stages, batch_size=2)))["image"]
    assert out.shape == (2, 3, 5, 1) and out.dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(out)[..., 0], gray[:, :, ::-1])


def test_colour_operators_refuse_bool_images_geometry_keeps_them():
    mask = jnp.zeros((1, 2, 3, 1), bool).at[0, 0, 0, 0].set(True)
    with pytest.raises(DataraxError, match=r"Brightness 'Brightness': field 'image' holds bool "
                       r"images; .* a\.astype\(jnp\.float32\) for masks of True/False\."):
        I.Brightness(0.2).apply_batch({"image": mask}, None)
    out = I.HorizontalFlip(1.0).apply_batch({"image": mask}, None)["image"]
    assert out.dtype == jnp.bool_ and out[0, 0, 2, 0] and int(out.sum()) == 1


def test_normalize_channel_mismatch_says_what_to_give():
    with pytest.raises(ConfigError, match=r"^Normalize 'Normalize': 3 mean/std values for images "
                       r"with 1 channel in field 'image'; give one value per channel \(1\) "
                       r"or one value for all\."):
        I.Normalize([0.5] * 3, [0.2] * 3).apply_batch({"image": jnp.zeros((1, 2, 2, 1))}, None)
    with pytest.raises(ConfigError, match=r"Normalize: mean and std must be finite"):
        I.Normalize(float("nan"), 1.0)


@pytest.mark.parametrize("make, message", [
    (lambda: I.Brightness(0.1, field=""), "Brightness: field must be the name of the batch field "
     "holding the images (a non-empty string, e.g. field='image'), got ''."),
    (lambda: I.RandomCrop(4, field=3), "RandomCrop: field must be the name of the batch field "
     "holding the images (a non-empty string, e.g. field='image'), got 3."),
    (lambda: I.Resize(4, antialias="yes"), "Resize: antialias must be True or False, got 'yes'."),
    (lambda: I.Brightness((0, 1), stream_name="not valid"), "Brightness: stream_name must be "
     "None or an identifier string (the nnx.Rngs stream to draw from, e.g. "
     "'augment'), got 'not valid'."),
    (lambda: I.ResizedCrop(4, (0, 0, 2, 2), antialias=1),
     "ResizedCrop: antialias must be True or False, got 1."),
    (lambda: I.RandomResizedCrop(4, antialias=None),
     "RandomResizedCrop: antialias must be True or False, got None."),
])
def test_settings_of_the_wrong_type_name_the_operator(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value) == message


def test_resize_antialias_false_is_kept():
    assert dict(I.Resize(4, antialias=False).config.params)["antialias"] is False


def test_an_image_and_its_mask_draw_alike_from_fresh_rngs_of_one_seed():
    from flax import nnx

    images = np.random.default_rng(0).integers(0, 256, (16, 9, 9, 1), dtype=np.uint8)

    def served(image_op, mask_op):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=2),
                              {"image": images, "mask": images.copy()})
        pipe = Pipeline(source=source, stages=[image_op, mask_op], batch_size=16,
                        rngs=nnx.Rngs(0))
        batch = next(iter(pipe))
        return np.asarray(batch["image"]), np.asarray(batch["mask"])

    image, mask = served(I.HorizontalFlip(field="image", rngs=nnx.Rngs(7)),
                         I.HorizontalFlip(field="mask", rngs=nnx.Rngs(7)))
    np.testing.assert_array_equal(image, mask)
    image, mask = served(I.RandomResizedCrop(5, field="image", rngs=nnx.Rngs(7)),
                         I.RandomResizedCrop(5, field="mask", rngs=nnx.Rngs(7)))
    np.testing.assert_array_equal(image, mask)
    image, mask = served(I.HorizontalFlip(field="image"), I.HorizontalFlip(field="mask"))
    assert not np.array_equal(image, mask)  # keyed by position: each its own draws


def test_numpy_scalar_settings_act_as_the_python_numbers():
    image = jnp.asarray(np.arange(4 * 5 * 3, dtype=np.uint8).reshape(1, 4, 5, 3))
    pairs = [
        (I.Resize(np.int64(3)), I.Resize(3)),
        (I.Crop(np.int32(2), offset=(np.int64(1), np.int64(2))), I.Crop(2, offset=(1, 2))),
        (I.ResizedCrop(2, tuple(np.array([0, 1, 3, 3]))), I.ResizedCrop(2, (0, 1, 3, 3))),
        (I.Rotate(np.float32(90.0), fill=np.float32(7.0)), I.Rotate(90.0, fill=7.0)),
        (I.Translate(np.float32(1.0), np.int64(-1)), I.Translate(1.0, -1)),
        (I.Brightness(np.float32(0.25)), I.Brightness(0.25)),
        (I.HorizontalFlip(np.float64(1.0)), I.HorizontalFlip(1.0)),
        (I.Cutout((np.int64(2), np.int64(1)), offset=(np.int64(1), np.int64(0))),
         I.Cutout((2, 1), offset=(1, 0))),
    ]
    for given, plain in pairs:  # the same settings, as Python numbers: the same operator
        assert given.config.params == plain.config.params, type(plain).__name__
    out = pairs[1][0].apply_batch({"image": image}, None)["image"]
    np.testing.assert_array_equal(out, np.asarray(image)[:, 1:3, 2:4])
    scale = tuple(np.array([0.5, 1.0], np.float32))
    assert I.RandomResizedCrop(2, scale=scale).param("scale") == (0.5, 1.0)
