"""Fresh processes a test starts: a benchmark module run with this checkout's ``src`` and
``benchmarks`` importable (:func:`benchmark_env`), or a script of the test's own
(:func:`run_script`, :func:`cpu_env`); JAX on the CPU in both (the tests' machine has no
chip)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def benchmark_env() -> dict[str, str]:
    """``os.environ`` with ``PYTHONPATH`` at this checkout and ``JAX_PLATFORMS=cpu``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "JAX_PLATFORMS": "cpu"}


def cpu_env() -> dict[str, str]:
    """``os.environ`` with ``JAX_PLATFORMS=cpu``: a test's own script's environment."""
    return dict(os.environ, JAX_PLATFORMS="cpu")


def run_script(script: Path, text: str, *args: str | os.PathLike[str],
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``text`` written to ``script`` and run with ``args`` as a fresh Python process
    (:func:`cpu_env`), its output captured as text; failing past ``timeout`` seconds."""
    script.write_text(text)
    return subprocess.run([sys.executable, str(script), *map(str, args)], env=cpu_env(),
                          capture_output=True, text=True, timeout=timeout)
