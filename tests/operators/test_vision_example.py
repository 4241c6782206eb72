"""examples/vision/image_classification.py runs as-is and resumes exactly."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vision" / "image_classification.py"


@pytest.mark.slow
def test_vision_example_runs_and_resumes_exactly(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "batch: {'image': ((64, 32, 32, 3), 'float32'), 'label': ((64, 3), 'float32')}" in out
    assert "soft labels sum to 1: True" in out
    assert "resumed batches identical: True" in out
