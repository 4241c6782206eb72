"""Real JAX processes on localhost for the multi-process tests (``tests/conftest.py``
puts this folder on ``sys.path``): each runs a worker script that writes its results
as JSON, and the test reads them back in process order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_jax_processes(worker: Path, count: int, folder: Path,
                      argv: Callable[[int, int, Path], list[str]], timeout: float = 120) -> list[Any]:
    """Starts ``count`` processes of ``python worker *argv(port, index, out)`` (CPU JAX,
    one coordinator port, ``out`` a JSON file in ``folder``), waits for all of them and
    returns each one's JSON in process order; a process that fails fails the test with
    the end of its output. Processes still running when this ends are killed."""
    import portpicker

    port = portpicker.pick_unused_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # the worker sets its own device count
    folder.mkdir(parents=True, exist_ok=True)
    outs = [folder / f"proc{i}.json" for i in range(count)]
    procs = [subprocess.Popen([sys.executable, str(worker), *argv(port, i, out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, out in enumerate(outs)]
    logs = []
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} failed:\n{logs[i][-3000:]}"
    return [json.loads(out.read_text()) for out in outs]
