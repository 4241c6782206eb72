"""The LM pretraining example runs as-is and its resumed run matches the uninterrupted one."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text" / "lm_pretraining.py"


@pytest.mark.slow
def test_lm_pretraining_example_resumes_exactly(capsys) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")  # asserts the match itself
    out = capsys.readouterr().out
    assert "crash at step 8" in out
    assert "resumed at step 6: 48 rows into pass 0" in out
    assert "resumed run matches the uninterrupted run: True" in out
