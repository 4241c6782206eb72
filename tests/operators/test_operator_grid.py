"""docs/scripts/operator_grid.py draws a valid PNG of the size it reports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "operator_grid.py"


def load_script():
    spec = importlib.util.spec_from_file_location("operator_grid", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # redraws the docs' picture: ~13 s
def test_grid_regenerates_as_a_png_of_the_expected_size(tmp_path):
    grid = load_script()
    out = tmp_path / "operators.png"
    tile = 12
    width, height = grid.render_grid(out, tile=tile)
    rows = len(grid.operators(tile))
    assert (width, height) == (grid.LABEL_WIDTH + 5 * (tile + 4) + 4, rows * (tile + 4) + 4)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size == (width, height)
        pixels = np.asarray(img.convert("RGB"))
    first_input = pixels[4:4 + tile, grid.LABEL_WIDTH:grid.LABEL_WIDTH + tile]
    np.testing.assert_array_equal(first_input, grid.sample_image(tile))
