"""What the benchmark scripts share: a fresh worker process and its environment, the turn
order of contenders, timing a library's functions, and printing and saving a report.

A worker is ``python -m benchmarks.<script> ... --out FILE`` in a fresh process (its own
imports, compiles and caches); it writes one JSON result to ``FILE``, which
:func:`run_worker` reads back. The script parses its own arguments; the harness only
starts it and reads what it wrote.

Example:
    >>> rotated(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    >>> env = worker_env({"DATARAX_COMPILE_AHEAD": "0"}, src="/other/src")
    >>> env["PYTHONPATH"].split(os.pathsep) == ["/other/src", str(ROOT)]
    True
    >>> "JAX_COMPILATION_CACHE_DIR" in env
    False
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ROOT", "emit", "parser", "rotated", "run_worker", "sized_parser", "time_calls",
           "worker_env"]

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def emit(result: Any, path: str | os.PathLike[str] | None = None, indent: int | None = 2) -> str:
    """Print ``result`` as JSON and, with ``path``, write it there too (its folder made);
    returns the text."""
    text = json.dumps(result, indent=indent)
    print(text, flush=True)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return text


def parser(doc: str | None, *paths: str, **defaults: float | str) -> argparse.ArgumentParser:
    """A script's argument parser: described by the first line of its docstring ``doc``,
    with an option ``--name`` per keyword (``seq_len``: ``--seq-len``) of the type and
    default of its value, then one per name in ``paths``: a file to write (a ``Path``,
    none by default).

    >>> options = parser("W0: a workload.", "json", records=1000, latency=0.05)
    >>> options.parse_args(["--latency", "1", "--json", "out.json"])
    Namespace(records=1000, latency=1.0, json=PosixPath('out.json'))
    """
    made = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    for name, default in defaults.items():
        made.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    for name in paths:
        made.add_argument(f"--{name.replace('_', '-')}", type=Path, default=None)
    return made


def sized_parser(doc: str | None, sections: str | None = None) -> argparse.ArgumentParser:
    """The parser of a script that runs at two sizes and writes one JSON report:
    ``--tiny`` (the smoke size its test runs), ``--sections`` (comma-separated, default
    ``sections``; only when given) and ``--out`` (where to write the report)."""
    made = parser(doc)
    made.add_argument("--tiny", action="store_true", help="smoke size (what the test runs)")
    if sections is not None:
        made.add_argument("--sections", default=sections)
    made.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    return made


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` starting at ``turn`` (modulo their number): each round of contenders in
    another order, so that none always goes first or last."""
    shift = turn % len(items)
    return [*items[shift:], *items[:shift]]


def worker_env(extra: dict[str, str] | None = None, *, src: str | os.PathLike[str] | None = None,
               cache_home: str | None = None, warm_up: bool = False) -> dict[str, str]:
    """The environment of a worker: this one's, less JAX's persistent cache folder (each
    worker compiles for itself unless ``warm_up``), TensorFlow quiet, ``extra`` set.

    ``PYTHONPATH``: with ``src``, that datarax source tree then the repository (nothing
    inherited: another tree's code is what is measured); without, the repository before
    the inherited path. ``cache_home`` becomes ``XDG_CACHE_HOME``; with ``warm_up`` it
    also holds JAX's persistent cache, turned on as a user would.
    """
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    parts = [str(src), str(ROOT)] if src else [str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    if cache_home:
        env["XDG_CACHE_HOME"] = cache_home
        if warm_up:
            env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(cache_home, "jax")
    return env


def run_worker(module: str, args: Sequence[str], env: dict[str, str], *,
               timeout: float | None = None, check: bool = False, out_flag: str = "--out",
               preexec_fn: Callable[[], None] | None = None) -> dict[str, Any]:
    """``python -m module *args --out FILE`` in a fresh process (from the repository's
    root); the JSON it wrote to ``FILE``.

    A worker that times out or writes nothing gives ``{"error": ..., "stderr": ...}``
    (a suite goes on past one), or with ``check`` raises ``RuntimeError`` with the
    worker's last error output.
    """
    with tempfile.TemporaryDirectory(prefix="datarax-bench-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", module, *args, out_flag, str(out)]
        try:
            proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=timeout, preexec_fn=preexec_fn)
        except subprocess.TimeoutExpired:
            failure = {"error": f"timed out after {timeout:.0f} s"}
        else:
            if out.exists() and (proc.returncode == 0 or not check):
                return dict(json.loads(out.read_text()))
            failure = {"error": f"worker exited {proc.returncode} without a result",
                       "stderr": proc.stderr[-3000:]}
    if check:
        raise RuntimeError(f"{module} {' '.join(args)}: {failure['error']}\n"
                           f"{failure.get('stderr', '')}")
    return failure


def time_calls(owner: Any, name: str, label: str, spent: dict[str, float]) -> None:
    """Replace ``owner.name`` by a wrapper adding the seconds of each call to
    ``spent[label]`` (for this process only: a benchmark's look inside a library)."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - began

    setattr(owner, name, timed)


def thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every live thread of this process, with its kernel name
    (``/proc/self/task/*/schedstat``; Linux)."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran = int(f.read().split()[0]) / 1e9
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        found[int(tid)] = (name, ran)
    return found
