"""Image operators for ``(batch, H, W, C)`` uint8 or float images (dm-pix where it serves).

Parameters are numbers (fixed) or ``(low, high)`` ranges (drawn per record); see
docs/operators.md.
"""

from datarax.operators.image._base import ImageOperator, ImageOperatorConfig
from datarax.operators.image.color import (
    Brightness,
    Contrast,
    GaussianBlur,
    Grayscale,
    Hue,
    Normalize,
    Saturation,
)
from datarax.operators.image.geometry import (
    Crop,
    HorizontalFlip,
    RandomCrop,
    RandomResizedCrop,
    Resize,
    ResizedCrop,
    Rotate,
    Translate,
    VerticalFlip,
)
from datarax.operators.image.occlusion import Cutout, GaussianNoise, PatchDropout, SaltPepperNoise
from datarax.operators.image.rand_augment import RandAugment

__all__ = [
    "Brightness", "Contrast", "Crop", "Cutout", "GaussianBlur", "GaussianNoise", "Grayscale",
    "HorizontalFlip", "Hue", "ImageOperator", "ImageOperatorConfig", "Normalize", "PatchDropout",
    "RandAugment", "RandomCrop", "RandomResizedCrop", "Resize", "ResizedCrop", "Rotate",
    "SaltPepperNoise", "Saturation", "Translate", "VerticalFlip",
]
