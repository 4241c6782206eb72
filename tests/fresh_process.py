"""The environment of a benchmark module run as a fresh process by a test: this checkout's
``src`` and ``benchmarks`` importable, JAX on the CPU (the tests' machine has no chip)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def benchmark_env() -> dict[str, str]:
    """``os.environ`` with ``PYTHONPATH`` at this checkout and ``JAX_PLATFORMS=cpu``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "JAX_PLATFORMS": "cpu"}
