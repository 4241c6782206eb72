"""Compiling the first pass on a thread when a Pipeline is built
(``datarax.pipeline.compile_ahead``).

The thread compiles every program the pass will call — the full batch, and the short
last batch a batch-level stage needs at its own size — so the epoch compiles nothing
once it is done; the batches and the errors are those of a pipeline that compiled
nothing ahead; no thread is left behind, and a process may exit right after building.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.compiled_store import counts
from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import SpecMismatchError
from datarax.errors import ConfigError
from datarax.pipeline import Pipeline
from datarax.pipeline import compile_ahead as compile_ahead_module
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.sources import MemorySource, MemorySourceConfig

SRC = Path(__file__).resolve().parents[2] / "src"


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "datarax-compile-ahead"]


def _join_ahead() -> None:
    for thread in _ahead_threads():
        thread.join(timeout=300)
    assert _ahead_threads() == []


def _compiles(before: dict[str, int]) -> int:
    now = counts()
    return now["compiled"] + now["loaded"] - before["compiled"] - before["loaded"]


def _centered(offset: float):
    """A batch-level stage (a plain callable: it sees the whole batch); ``offset`` makes
    each test's program new to this process."""
    def stage(batch):
        x = batch["x"]
        return {"x": x - x.mean() + offset}
    return stage


def _pipeline(stages, n=10, batch_size=4, **options):
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                          {"x": np.arange(n, dtype=np.float32)})
    return Pipeline(source=source, stages=stages, batch_size=batch_size,
                    rngs=nnx.Rngs(0), **options)


# The compile counts are the process's: both kinds run, one after the other, in a fresh
# interpreter, where no other test's pipelines (their read-ahead threads) compile at the
# same time.
_COUNTING = """
import sys, threading
import numpy as np
from flax import nnx
from datarax.core.compiled_store import counts
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

def compiles(before):
    now = counts()
    return now["compiled"] + now["loaded"] - before["compiled"] - before["loaded"]

def join_ahead():
    for t in [t for t in threading.enumerate() if t.name == "datarax-compile-ahead"]:
        t.join(timeout=300)

def centered(batch):
    x = batch["x"]
    return {"x": x - x.mean() + 0.25}

keep = FilterOperator(predicate=lambda el: el.data["x"] % 3 != 1.5)
for kind in sys.argv[1:]:  # one after the other: each kind's pass is over before the next
    if kind == "exit":  # last: build, then exit while the thread compiles
        import atexit
        import time
        import jax.numpy as jnp
        from datarax.pipeline import compile_ahead as compile_ahead_module

        # the first program's compile starts only once the main thread has ended (on a
        # loaded machine the thread could otherwise finish it before the main thread ends)
        exiting, asked = compile_ahead_module._exiting, []
        def first_program_at_exit():
            if not asked:
                asked.append(True)
                while not exiting():
                    time.sleep(0.01)
                return False
            return exiting()
        compile_ahead_module._exiting = first_program_at_exit

        def heavy(batch):
            x = batch["x"]
            for i in range(12):
                x = jnp.sin(x) * (i + 1.5) + jnp.cumsum(x)
            return {"x": x}
        base = counts()["compiled"]
        atexit.register(lambda: print("compiled", counts()["compiled"] - base))
        source = MemorySource(MemorySourceConfig(), {"x": np.arange(60, dtype=np.float32)})
        Pipeline(source=source, stages=[heavy], batch_size=8)
        print("built")
        break
    n, stages = {"batch-level": (10, [centered]), "filter": (12, [keep]),
                 "filter-batch-level": (12, [keep, centered])}[kind]
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=5), {"x": np.arange(n, dtype=np.float32)})
    before = counts()
    pipeline = Pipeline(source=source, stages=stages, batch_size=4, rngs=nnx.Rngs(0))
    join_ahead()
    ahead = compiles(before)
    during = counts()
    batches = [np.asarray(b["x"]) for b in pipeline]
    print(kind, ahead, compiles(during), [len(b) for b in batches],
          sorted(int(x) for b in batches for x in b) if kind == "filter" else
          [round(float(b.mean()), 6) for b in batches])
"""


@pytest.fixture(scope="module")
def counted() -> dict[str, list[str]]:
    """Each kind's ``[ahead, during, rest]``, and ``exit``: the lines the process printed
    after building its last pipeline, from one fresh interpreter (one start-up)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "JAX_PLATFORMS": "cpu",
           "DATARAX_COMPILE_CACHE": "0"}
    env.pop("DATARAX_COMPILE_AHEAD", None)
    done = subprocess.run([sys.executable, "-c", _COUNTING, "batch-level", "filter",
                           "filter-batch-level", "exit"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stdout.strip().splitlines()
    built = lines.index("built")
    kinds = {kind: rest for kind, *rest in (line.split(" ", 3) for line in lines[built - 3:built])}
    return {**kinds, "exit": lines[built:]}


def test_the_thread_compiles_the_full_and_the_short_batch_before_the_first_is_asked(counted):
    ahead, during, rest = counted["batch-level"]
    assert (ahead, during) == ("2", "0")  # batches of 4 and the last of 2; the epoch none
    assert rest == "[4, 4, 2] [0.25, 0.25, 0.25]"


def test_a_filtered_pipelines_step_is_compiled_ahead(counted):
    ahead, during, rest = counted["filter"]
    assert (ahead, during) == ("1", "0")
    assert rest.endswith(str(list(range(12))))


def test_a_batch_level_stage_after_a_filter_is_compiled_ahead_too(counted):
    ahead, during, rest = counted["filter-batch-level"]
    assert (ahead, during) == ("2", "0")  # the filtered step, the stage apart; the epoch none
    assert rest == "[4, 4, 4] [0.25, 0.25, 0.25]"


@pytest.mark.parametrize("stages", [[_centered(0.5)], []], ids=["batch-level", "none"])
def test_batches_are_those_compiled_without_the_thread(stages, monkeypatch):
    monkeypatch.setenv("DATARAX_COMPILE_AHEAD", "0")
    # an earlier test's thread (tests/pipeline/test_knobs_keep_values.py turns it on) may
    # still be ending: only the threads this pipeline started count
    before = set(_ahead_threads())
    plain = [np.asarray(b["x"]).tobytes() for b in _pipeline(stages, n=11)]
    assert [t for t in _ahead_threads() if t not in before] == []  # turned off: no thread
    monkeypatch.delenv("DATARAX_COMPILE_AHEAD")
    ahead = [np.asarray(b["x"]).tobytes() for b in _pipeline(stages, n=11)]
    _join_ahead()
    assert ahead == plain


def test_a_switch_value_neither_on_nor_off_is_refused_when_the_pipeline_is_built(monkeypatch):
    before = set(_ahead_threads())
    monkeypatch.setenv("DATARAX_COMPILE_AHEAD", "disable")  # meant as off: not read as on
    with pytest.raises(ConfigError, match=r"^DATARAX_COMPILE_AHEAD='disable' is neither on nor "
                                          r"off: set it to 0 \(also false, off, no\) to turn it "
                                          r"off, or 1 \(or leave it unset\) to keep it on\.$"):
        _pipeline([])
    assert [t for t in _ahead_threads() if t not in before] == []
    monkeypatch.setenv("DATARAX_COMPILE_AHEAD", " Off ")
    assert [b["x"].shape[0] for b in _pipeline([])] == [4, 4, 2]
    assert [t for t in _ahead_threads() if t not in before] == []


def _failing(batch):
    raise ValueError(f"this stage refuses a batch of {batch['x'].shape[0]} records")


def test_an_error_while_compiling_ahead_is_met_at_the_first_batch_with_its_message(monkeypatch):
    messages = []
    for ahead in ("0", "1"):
        monkeypatch.setenv("DATARAX_COMPILE_AHEAD", ahead)
        pipeline = _pipeline([_failing])  # built: nothing is refused yet
        with pytest.raises(ValueError) as raised:
            next(iter(pipeline))
        messages.append(str(raised.value))
        _join_ahead()
    assert messages[0] == messages[1]
    assert "this stage refuses a batch of 4 records" in messages[0]


def test_a_process_may_exit_right_after_building_and_waits_for_one_program_at_most(counted):
    """60 records in batches of 8: a batch-level stage needs two programs (8 and the
    short 4); the process exits while the first compiles (the script holds that
    compile until the main thread has ended), and the second is never started (the
    interpreter waits for the thread, which ends before atexit runs)."""
    words = " ".join(counted["exit"]).split()
    assert words[0] == "built" and words[1] == "compiled", words
    assert int(words[2]) == 1  # the program in flight at exit, never the short one


class _Unlisted(IndexedDispatch):
    """A pass whose list of programs fails (a fault of compiling ahead alone)."""

    def programs(self):
        raise RuntimeError("the programs of this pass could not be listed")


def test_a_failure_preparing_the_pass_is_reported_once_when_the_first_pass_starts(
        monkeypatch, caplog):
    monkeypatch.delenv("DATARAX_COMPILE_AHEAD", raising=False)
    plain = [np.asarray(b["x"]).tolist() for b in _pipeline([_centered(0.125)], n=10)]
    _join_ahead()
    monkeypatch.setattr(compile_ahead_module, "IndexedDispatch", _Unlisted)
    pipeline = _pipeline([_centered(0.125)], n=10)
    _join_ahead()  # the thread failed before the pass started: nothing reported yet
    assert [r for r in caplog.records if r.name == "datarax.compile"] == []
    with caplog.at_level(logging.WARNING, logger="datarax.compile"):
        first = [np.asarray(b["x"]).tolist() for b in pipeline]
        second = [np.asarray(b["x"]).tolist() for b in pipeline]
    warned = [r.getMessage() for r in caplog.records if r.name == "datarax.compile"]
    assert len(warned) == 1
    assert warned[0].startswith("datarax: compiling the first pass ahead failed; the pass "
                                "compiles its programs itself:\nTraceback")
    assert warned[0].endswith("RuntimeError: the programs of this pass could not be listed")
    assert first == plain and len(second) == 3  # the pass compiled what it needed itself


class _MisDeclared(DataSourceModule):
    """An indexed source whose element_spec() declares int32 where it serves float32."""

    def __init__(self):
        super().__init__(StructuralConfig())

    def __len__(self):
        return 6

    def get_batch_at(self, start, size, key=None):
        return {"x": (jnp.arange(size) + start).astype(jnp.float32)}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), jnp.int32)}


def test_a_check_the_pass_raises_itself_is_not_also_reported_as_a_warning(
        monkeypatch, caplog):
    """A wrong element_spec is the first pass's error, said once: no warning carrying a
    traceback of the same error before it."""
    monkeypatch.delenv("DATARAX_COMPILE_AHEAD", raising=False)
    pipeline = Pipeline(source=_MisDeclared(), stages=[], batch_size=2)
    _join_ahead()
    with caplog.at_level(logging.WARNING, logger="datarax.compile"):
        with pytest.raises(SpecMismatchError, match="field 'x' has dtype float32, declared int32"):
            next(iter(pipeline))
    assert [r.getMessage() for r in caplog.records if r.name == "datarax.compile"] == []


def test_work_between_building_and_iterating_is_seen_by_the_pass(monkeypatch):
    """A restore between building and the first batch moves the pass: the batches are
    those of the restored position, whatever the thread prepared."""
    monkeypatch.delenv("DATARAX_COMPILE_AHEAD", raising=False)
    reference = _pipeline([_centered(0.75)], n=12)
    expected = [np.asarray(b["x"]).tolist() for b in reference][1:]
    pipeline = _pipeline([_centered(0.75)], n=12)
    pipeline.source.seek(0, 4)
    assert [np.asarray(b["x"]).tolist() for b in pipeline] == expected
    _join_ahead()
