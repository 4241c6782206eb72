"""The one read-ahead engine (``sources/read_ahead.py``): batches of exactly the size
asked across chunks, a bad record's error held back to the batch that would pass it,
worker results in order with nothing left running, sessions that end only themselves,
and one cursor serving host reads, streams and packed text with exact resume."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from fresh_process import run_script

from datarax.core.cursor import SessionEnded
from datarax.core.reading import cursor_of
from datarax.sources import NpySource, NpySourceConfig
from datarax.sources.read_ahead import Chunks, SessionCursor, Sessions, Workers
from datarax.text import PackedTextConfig, PackedTextSource


def test_chunks_hand_out_exact_batches_across_chunks_with_their_end_positions():
    chunks = Chunks()
    chunks.append({"x": np.arange(3)}, np.arange(10, 13), np.arange(3))
    # position 3 was a bad record, skipped: a batch passing it ends after position 8
    chunks.append({"x": np.arange(3, 8)}, np.arange(13, 18), np.arange(4, 9))
    chunks.append({"x": np.arange(8, 10)}, np.arange(18, 20), np.arange(9, 11))
    got = [chunks.take(4) for _ in range(3)]
    assert [b.columns["x"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.indices.tolist() for b in got][0] == [10, 11, 12, 13]
    assert [b.end for b in got] == [5, 9, 11]
    assert chunks.take(4) is None and chunks.held == 0


def test_a_held_back_error_is_raised_by_the_batch_that_would_pass_the_bad_record():
    chunks = Chunks()
    chunks.append({"x": np.arange(6)}, np.arange(6), np.arange(6))
    chunks.fail(ValueError("record 6 is bad"))
    assert chunks.take(4).columns["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="record 6 is bad"):
        chunks.take(4)  # would pass record 6
    assert chunks.take(2).columns["x"].tolist() == [4, 5]  # nothing was taken by the raise
    chunks.clear()
    assert chunks.failure is None and chunks.take(1) is None


def test_workers_deliver_in_submission_order_raise_where_taken_and_leave_no_thread():
    def work(n: int) -> int:
        time.sleep(0.01 * (4 - n))  # later work finishes first
        if n == 2:
            raise KeyError(f"work {n}")
        return n

    workers = Workers(4, "engine-test")
    for n in range(4):
        workers.submit(work, n)
    assert [workers.take(), workers.take()] == [0, 1]
    with pytest.raises(KeyError, match="work 2"):
        workers.take()
    workers.submit(time.sleep, 30)  # cancelled or waited for: never left running
    workers.stop()
    assert len(workers) == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("engine-test")]


def test_a_session_ends_only_itself():
    sessions = Sessions("Src")
    first = sessions.begin()
    second = sessions.begin()
    released: list[int] = []
    sessions.end(first, lambda: released.append(first))  # late: the newer one reads on
    assert released == [] and sessions.current == second
    sessions.check(second)
    sessions.end(second, lambda: released.append(second))
    assert released == [second]
    with pytest.raises(SessionEnded):
        sessions.check(second)


def _npy(tmp_path) -> NpySource:
    path = tmp_path / "x.npy"
    np.save(path, np.arange(20, dtype=np.int32))
    return NpySource(NpySourceConfig(paths=str(path)))


def _text(tmp_path) -> PackedTextSource:
    docs = [" ".join(["w"] * (1 + i % 5)) for i in range(30)]
    return PackedTextSource(PackedTextConfig(seq_len=6), lambda: docs,
                            lambda text: [len(w) + i for i, w in enumerate(text.split())])


def _stream(tmp_path):
    pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    path = tmp_path / "train.parquet"
    if not path.exists():
        pq.write_table(pa.table({"idx": pa.array(np.arange(20, dtype=np.int32))}), str(path))
    return HFStreamingSource(HFStreamingConfig(name="parquet", data_files=str(path),
                                               chunk_size=4))


def _values(batch: dict, key: str) -> list:
    return np.asarray(batch[key]).tolist()


@pytest.mark.parametrize("make, key", [(_npy, "data"), (_stream, "idx"), (_text, "tokens")],
                         ids=["host", "stream", "text"])
def test_one_cursor_reads_ahead_without_moving_and_resumes_exactly(tmp_path, request, make,
                                                                   key):
    if make is _stream:
        request.getfixturevalue("hf_offline")
    source = make(tmp_path)
    cursor = cursor_of(source)
    assert type(cursor) is SessionCursor
    first, second = cursor.peek(3), cursor.peek(3)
    assert source.index == 0  # read ahead: the position is what was handed out
    cursor.commit(first[2])
    assert source.index == first[2]
    state = source.get_state()
    cursor.release()
    assert not cursor.current
    with pytest.raises(SessionEnded):  # a released session reads no more
        cursor.peek(3)
    resumed = make(tmp_path)
    resumed.set_state(state)
    assert _values(resumed.get_batch(3), key) == _values(second[0], key)
    for s in (source, resumed):
        s.close()


FORKED_WORKERS = '''
import os, sys, threading, time
from datarax.sources.read_ahead import Workers

parent, started, release = os.getpid(), threading.Event(), threading.Event()

def square(n):
    if os.getpid() == parent and n == 0:  # in the parent: busy on a thread when it forks
        started.set()
        release.wait()
    return n * n

workers = Workers(1, "Src")
for n in range(4):
    workers.submit(square, n)
started.wait()
pid = os.fork()
if pid == 0:  # the thread running square(0) and the queue behind it are the parent's
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(str(workers.take()) for _ in range(4)))
    os._exit(0)
deadline = time.monotonic() + 100  # (a bound on failure only)
while os.waitpid(pid, os.WNOHANG) == (0, 0):
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        sys.exit("the forked child waited for the parent's threads")
    time.sleep(0.05)
release.set()
print("parent", [workers.take() for _ in range(4)], flush=True)
workers.stop()
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork (POSIX)")
def test_a_forked_child_runs_the_work_its_parents_threads_had_not_finished(tmp_path):
    got = tmp_path / "child.txt"
    run = run_script(tmp_path / "fork.py", FORKED_WORKERS, got)
    assert run.returncode == 0, run.stderr[-3000:]
    assert got.read_text() == "0 1 4 9"  # every result, in order, the running one too
    assert "parent [0, 1, 4, 9]" in run.stdout
