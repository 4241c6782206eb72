"""SIGKILL after a checkpoint, resume in a new process: exactly one epoch, in order.

A child process hands out batches, checkpoints its state to a file, hands out two
more batches (lost work) and is killed with SIGKILL. A new process restores the
file and finishes the epoch. The batches handed out up to the checkpoint plus the
resumed ones are exactly the uninterrupted epoch: same records, order and draws.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from forked_runs import ForkedRuns

from datarax.testing import collect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import kill_worker  # noqa: E402


# The run and the resume are new processes forked from one that imported what
# kill_worker.py needs and did nothing else: one interpreter start-up and import, not two.
WORKER_IMPORTS = """
from flax import nnx
from datarax.pipeline import Pipeline
import kill_worker, reliability_sources
try:
    import reliability_arrayrecord
except ImportError:
    pass
"""


def _start(runs: ForkedRuns, mode: str, kind: str, tmp: Path) -> int:
    return runs.start(HERE / "kill_worker.py", [mode, kind, str(tmp / "ckpt.json"),
                                               str(tmp / f"{mode}.log"), str(tmp / "ready")],
                      tmp / f"{mode}.out")


def kill_and_resume(kind: str, tmp: Path) -> tuple[list, list, dict]:
    """Run, SIGKILL after the checkpoint, resume; return (before, resumed, checkpoint)."""
    path = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(path))
    with ForkedRuns(WORKER_IMPORTS, tmp, env) as runs:
        child = _start(runs, "run", kind, tmp)
        deadline = time.monotonic() + 120
        while not (tmp / "ready").exists():
            if (code := runs.poll(child)) is not None:
                raise AssertionError(f"child ended early ({code}):\n"
                                     f"{(tmp / 'run.out').read_text()[-3000:]}")
            if time.monotonic() > deadline:
                os.kill(child, signal.SIGKILL)
                raise AssertionError("child never reached the kill point")
            time.sleep(0.05)
        os.kill(child, signal.SIGKILL)
        assert runs.wait(child) == -signal.SIGKILL
        checkpoint = json.loads((tmp / "ckpt.json").read_text())
        run_log = [json.loads(line) for line in (tmp / "run.log").read_text().splitlines()]
        assert len(run_log) == kill_worker.CHECKPOINT_AT + 2  # two batches of lost work
        code = runs.wait(_start(runs, "resume", kind, tmp))
        assert code == 0, (tmp / "resume.out").read_text()[-3000:]
    resumed_log = [json.loads(line) for line in (tmp / "resume.log").read_text().splitlines()]
    return run_log[: checkpoint["logged_batches"]], resumed_log, run_log


def expected_epoch(kind: str) -> list:
    pipeline = kill_worker.make(kind)
    with pipeline.source:  # closing joins any reader threads
        return [kill_worker.ids(b) for _, b in collect(pipeline, 1)]


@pytest.mark.parametrize(
    "kind",
    [
        "arrayrecord",
        pytest.param("memory", marks=pytest.mark.slow),
        pytest.param("stream", marks=pytest.mark.slow),
    ],
)
def test_sigkill_after_checkpoint_then_resume_is_exactly_one_epoch(kind, tmp_path):
    skipped = 0
    if kind == "arrayrecord":
        pytest.importorskip("datarax.sources.array_record")
        from reliability_arrayrecord import write_files

        # Records 4 and 17 fail to decode and are skipped (on_error="skip").
        kind = "arrayrecord:" + write_files(tmp_path / "ar", 23, num_files=3)
        skipped = 2
    before, resumed, run_log = kill_and_resume(kind, tmp_path)
    expected = expected_epoch(kind)
    assert before + resumed == expected
    # The lost work (handed out after the checkpoint, before the kill) is replayed.
    assert run_log[len(before):] == resumed[: len(run_log) - len(before)]
    ids = [i for batch, _ in before + resumed for i in batch]
    assert len(ids) == len(set(ids)) == 23 - skipped
    assert np.asarray(expected[0][1]).shape == (3, 2)  # augmentation draws are compared
