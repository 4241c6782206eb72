"""The centred box a random resized crop falls back to when none of its candidates fits:
one rule for ``RandomResizedCrop`` (operators) and the decoder's crop (``dataset``).

Example:
    >>> fallback_box(10, 40, 3 / 4, 4 / 3)
    (0, 13, 10, 13)
"""

from __future__ import annotations

__all__ = ["fallback_box"]


def fallback_box(height: int, width: int, low: float, high: float) -> tuple[int, int, int, int]:
    """``(y, x, h, w)`` when no candidate fits: the centred box of the whole image's width
    or height at the nearest allowed aspect ratio (torchvision's ``RandomResizedCrop``),
    at least one pixel high and wide.

    Example:
        >>> fallback_box(10, 40, 3 / 4, 4 / 3), fallback_box(10, 12, 3 / 4, 4 / 3)
        ((0, 13, 10, 13), (0, 0, 10, 12))
        >>> fallback_box(1, 1, 3.0, 4.0)  # torchvision's rounding would give 0 rows
        (0, 0, 1, 1)
    """
    if width / height < low:
        h = min(height, max(1, round(width / low)))
        return (height - h) // 2, 0, h, width
    if width / height > high:
        w = min(width, max(1, round(height * high)))
        return 0, (width - w) // 2, height, w
    return 0, 0, height, width
