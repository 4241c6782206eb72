"""docs/devices.md's code on 8 CPU devices (the docs test runs it on one)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "docs"))

from test_docs import python_blocks  # noqa: E402


def test_devices_page_runs_on_eight_devices(tmp_path):
    blocks = [code for _, code, skipped in python_blocks((ROOT / "docs" / "devices.md").read_text())
              if not skipped]
    assert len(blocks) >= 7
    namespace: dict = {"__name__": "__docs__"}
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            for code in blocks:
                exec(compile(code, "docs/devices.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    lines = out.getvalue().splitlines()
    assert lines == [
        "True",
        "True",  # stages_on: the same batches both ways
        "(16, 4, 4) P('data',)",
        "8",
        "P('data', 'model') P('data',)",
        "(8,) ('data',)",
        "(6,) 1 32",
        str(list(range(12))),
    ], lines
    # the 2-D mesh: 4 x 2 devices, image rows split 4 ways and columns 2 ways
    image = next(iter(namespace["pipeline_2d"]))["image"]
    assert {s.data.shape for s in image.addressable_shards} == {(4, 2, 4)}
