"""Threads working ahead of the loop (the pipeline's worker, a host reader's threads)
keep their priority unless the user asks (``lower_read_ahead_priority``); then they run
at a lower OS priority than the loop's thread, so a loop waking from its train step is
not kept waiting behind them on a busy machine."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest
from flax import nnx
from waiting import eventually, threads_started_since

from datarax.core import threads
from datarax.core.threads import lower_read_ahead_priority, run_behind_consumer
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread priorities are a Linux feature")


def _priority(thread: threading.Thread) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread.native_id)


def _ours(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


BEHIND = 10


@pytest.fixture
def behind():
    lower_read_ahead_priority(BEHIND)
    yield
    lower_read_ahead_priority(0)


def test_by_default_read_ahead_threads_keep_the_loops_priority(tmp_path) -> None:
    assert threads.BEHIND == 0
    loop = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    # other tests' sources may still hold reader threads (an epoch's end keeps them
    # reading the next epoch's start until the source stops or closes): only this one's
    earlier = set(threading.enumerate())
    path = tmp_path / "x.npy"
    np.save(path, np.arange(256, dtype=np.float32))
    source = NpySource(NpySourceConfig(paths={"x": str(path)}))
    iterator = iter(Pipeline(source=source, batch_size=8, prefetch=2, rngs=nnx.Rngs(0)))
    assert [np.asarray(next(iterator)["x"]).tolist()[0] for _ in range(4)] == [0, 8, 16, 24]
    workers = [t for t in threads_started_since(earlier)
               if t.name == "datarax-dispatch" or "-reader" in t.name]
    assert workers and all(_priority(t) == loop for t in workers)
    assert run_behind_consumer() is False
    iterator.close()
    source.close()


def test_the_opt_in_takes_a_nice_step_count() -> None:
    with pytest.raises(ValueError, match="from 0 to 19, got 25"):
        lower_read_ahead_priority(25)
    assert threads.BEHIND == 0


def test_run_behind_consumer_lowers_only_the_calling_thread(behind) -> None:
    loop = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def work() -> None:
        seen["changed"] = run_behind_consumer()
        seen["priority"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == {"changed": True, "priority": min(19, loop + BEHIND)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop


def test_the_pipelines_worker_runs_behind_the_loop(behind) -> None:
    loop = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    earlier = set(_ours("datarax-dispatch"))  # another test's worker may await collection
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(64, dtype=np.float32)})
    iterator = iter(Pipeline(source=source, batch_size=8, prefetch=2, rngs=nnx.Rngs(0)))
    assert np.asarray(next(iterator)["x"]).tolist() == list(range(8))
    workers = [t for t in _ours("datarax-dispatch") if t not in earlier]
    assert workers
    # from its second batch on (its first may compile: XLA's compiler threads, started
    # on first use, must not inherit a lowered priority)
    assert eventually(lambda: all(_priority(t) == min(19, loop + BEHIND) for t in workers))
    iterator.close()


def test_compiler_threads_started_by_the_worker_keep_the_loops_priority() -> None:
    import subprocess

    code = (
        "import os, numpy as np\n"
        "from flax import nnx\n"
        "from datarax.sources import MemorySource, MemorySourceConfig\n"
        "from datarax.pipeline import Pipeline\n"
        "from datarax.core.threads import lower_read_ahead_priority\n"
        "lower_read_ahead_priority(10)\n"
        "src = MemorySource(MemorySourceConfig(), {'x': np.arange(64, dtype=np.float32)})\n"
        "it = iter(Pipeline(source=src, batch_size=8, prefetch=2))\n"
        "[next(it) for _ in range(3)]\n"
        "task = f'/proc/{os.getpid()}/task'\n"
        "for tid in os.listdir(task):\n"
        "    try:  # a thread may end after the listing\n"
        "        name = open(f'{task}/{tid}/comm').read().strip()\n"
        "        print(name, os.getpriority(os.PRIO_PROCESS, int(tid)))\n"
        "    except (FileNotFoundError, ProcessLookupError):\n"
        "        pass\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split("\n")
    compilers = [line for line in out if line.startswith("llvm-worker")]
    assert compilers, out  # the pipeline's step was compiled in that process
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert all(int(line.split()[-1]) == base for line in compilers), compilers


def test_a_host_readers_threads_run_behind_the_loop(tmp_path, behind) -> None:
    loop = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    # other tests' sources may still hold reader threads (an epoch's end keeps them
    # reading the next epoch's start until the source stops or closes): only this one's
    earlier = set(threading.enumerate())
    path = tmp_path / "x.npy"
    np.save(path, np.arange(256, dtype=np.float32))
    source = NpySource(NpySourceConfig(paths={"x": str(path)}))
    pipeline = Pipeline(source=source, batch_size=8, prefetch=2, rngs=nnx.Rngs(0))
    iterator = iter(pipeline)
    assert np.asarray(next(iterator)["x"]).tolist() == list(range(8))
    readers = [t for t in threads_started_since(earlier) if "-reader" in t.name]
    assert readers
    # a pool's thread lowers itself first thing it runs: one started for a read ahead
    # may not have run yet when the first batch is served
    assert eventually(lambda: all(_priority(t) == min(19, loop + BEHIND) for t in readers))
    iterator.close()
    source.close()
