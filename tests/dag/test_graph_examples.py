"""examples/graphs/ run as-is and print what they promise (they assert it themselves too)."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graphs"


def test_contrastive_views_example(capsys) -> None:
    runpy.run_path(str(EXAMPLES / "contrastive_views.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "fields: ['target_label', 'view1_image', 'view2_image'] (16, 8, 8)" in out
    assert "views identical at batch size 16 and 8: True" in out


def test_mixture_resume_example(capsys) -> None:
    runpy.run_path(str(EXAMPLES / "mixture_resume.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "realised shares web/books/captions: [0.5, 0.3, 0.2]" in out
    assert "saved at record 350 source state: {'current_index': 350, 'current_epoch': 0, " in out
    assert "resumed run matches the uninterrupted run: True" in out
