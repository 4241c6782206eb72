"""A pipeline's iterator used from several threads: one iterator shared by two threads,
or ``pipeline.step()`` called from two, hands out each batch once (its ``next()`` calls
take turns), and two loops started at
once on two threads end with one ``StaleIteratorError`` at most and no worker thread of
either left behind (an iterator superseded while it makes a batch on its own thread
releases what that batch opened)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from datarax.core.errors import StaleIteratorError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

from waiting import eventually, threads_started_since

RECORDS = 480


def _pipeline(kind: str, tmp_path) -> Pipeline:
    if kind == "memory":
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                              {"x": np.arange(RECORDS, dtype=np.int32)})
    else:
        pytest.importorskip("array_record")
        from int_record_files import int_source, write_int_parts

        source = int_source(write_int_parts(tmp_path, [RECORDS // 2, RECORDS]),
                            shuffle_files=True, seed=3, num_threads=2)
    return Pipeline(source=source, stages=[], batch_size=4, shard_index=0, shard_count=1)


def _run_on_threads(*targets) -> None:
    start = threading.Barrier(len(targets))

    def run(target) -> None:
        start.wait()
        target()

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)


@pytest.mark.parametrize("kind", ["memory", "arrayrecord"])
def test_one_iterator_shared_by_two_threads_hands_out_each_batch_once(kind, tmp_path):
    pipeline = _pipeline(kind, tmp_path)
    iterator = iter(pipeline)
    taken: dict[str, list[int]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def loop(name: str) -> None:
        try:
            for batch in iterator:
                taken[name].extend(np.asarray(batch["x"]).tolist())
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)

    _run_on_threads(lambda: loop("a"), lambda: loop("b"))
    assert errors == []
    assert sorted(taken["a"] + taken["b"]) == list(range(RECORDS))
    pipeline.source.close()


def test_two_loops_started_at_once_leave_no_worker_thread():
    before = set(threading.enumerate())
    outcomes: list[str] = []
    for _ in range(4):
        pipeline = _pipeline("memory", None)

        def loop() -> None:
            try:
                count = sum(len(batch["x"]) for batch in pipeline)
                outcomes.append(f"served {count}")
            except StaleIteratorError:
                outcomes.append("stale")

        _run_on_threads(loop, loop)
    # each pair: the newer loop serves a whole pass, or both do, one after the other
    assert len(outcomes) == 8 and set(outcomes) <= {"stale", f"served {RECORDS}"}
    assert outcomes.count(f"served {RECORDS}") >= 4
    assert eventually(lambda: not threads_started_since(before)), threads_started_since(before)


def test_step_from_two_threads_hands_out_each_batch_once():
    pipeline = _pipeline("memory", None)
    taken: dict[str, list[int]] = {"a": [], "b": []}

    def steps(name: str) -> None:
        for _ in range(RECORDS // 8):  # together, one epoch of batches of 4
            taken[name].extend(np.asarray(pipeline.step()["x"]).tolist())

    _run_on_threads(lambda: steps("a"), lambda: steps("b"))
    assert sorted(taken["a"] + taken["b"]) == list(range(RECORDS))
