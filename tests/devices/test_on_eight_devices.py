"""Runs tests/devices/eight/check_*.py in a child pytest on 8 simulated CPU devices.

``--xla_force_host_platform_device_count`` is read once, when JAX starts its CPU
backend, and the main test process starts it with one device (tests/conftest.py).
The checks therefore run in a child process started with the flag; each check file
is one test here, so a failure names the file and shows the child's report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHECKS = sorted((HERE / "eight").glob("check_*.py"))


# The docs' and the fused-step checks are the heaviest (~6 s each): in the slow run.
HEAVY = {"check_docs", "check_fused", "check_sharding", "check_stages_on"}


@pytest.mark.parametrize("check", [
    pytest.param(c, marks=pytest.mark.slow) if c.stem in HEAVY else c for c in CHECKS
], ids=[c.stem for c in CHECKS])
def test_checks_on_eight_cpu_devices(check: Path) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(check), "-q", "-n", "0", "-p", "no:cacheprovider",
         "-o", "python_files=check_*.py", "-o", "addopts=--import-mode=importlib", "-rf"],
        env=env, capture_output=True, text=True, timeout=280,
    )
    assert run.returncode == 0, f"{check.name} failed on 8 devices:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    summary = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=* ?\d+ passed in [\d.]+s( \(.*\))? ?=*", summary), summary
