"""ArrayRecordSourceModule(decode_processes=n): records decoded in worker processes.

The same batches, resume and bad-record handling as decoding on reader threads; errors
that say what happened. Decode functions are made inside the tests (cloudpickle sends
them by value, as it does a script's functions).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import threading

import numpy as np
import pytest

pytest.importorskip("array_record")
from fresh_process import cpu_env, run_script  # noqa: E402
from int_record_files import runs, write_parts  # noqa: E402
from flax import nnx  # noqa: E402

from datarax.core.errors import ConfigError, DataraxError, RecordError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402


def write_files(directory: pathlib.Path, sizes: list[int]) -> list[str]:
    return write_parts(directory, runs(sizes),
                       lambda i: np.asarray([i, 10 * i], np.int32).tobytes())


def decoder(fail_on: frozenset[int] = frozenset(), error: type[BaseException] = ValueError,
            exit_on: int | None = None, unless: str | None = None):
    """A decode made here (sent by value): fails on ids in ``fail_on``, ends its
    process on ``exit_on`` (while the file ``unless`` does not exist)."""
    def decode(record: bytes) -> dict[str, np.ndarray]:
        values = np.frombuffer(record, np.int32)
        if int(values[0]) == exit_on and not (unless and os.path.exists(unless)):
            os._exit(3)
        if int(values[0]) in fail_on:
            raise error(f"record id {int(values[0])} is bad")
        return {"id": values[0], "pair": values.copy()}
    return decode


def make(paths, processes: int, decode=None, **config):
    return ArrayRecordSourceModule(
        ArrayRecordSourceConfig(**{"seed": 3, "shuffle_files": True, **config}), paths,
        decode=decode or decoder(), num_threads=2, decode_processes=processes)


def pipeline(source, batch_size=4):
    return Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))


def ids(batches) -> list[int]:
    return [int(i) for b in batches for i in np.asarray(b["id"])]


@pytest.fixture
def files(tmp_path):
    return write_files(tmp_path, [9, 6, 10])  # 25 records in 3 files


@pytest.mark.slow  # heavy; the default run covers this path in lighter tests
def test_processes_serve_the_same_batches_as_threads_and_resume_exactly(files):
    threads = pipeline(make(files, 0))
    want = [ids(threads), ids(threads)]  # two epochs, shuffled
    threads.source.close()
    assert sorted(want[0]) == list(range(25)) and want[0] != want[1]

    source = make(files, 2)
    try:
        got = pipeline(source)
        first = [ids(got), ids(got)]
        assert first == want
        batch = next(iter(pipeline(make(files, 0))))
        assert np.asarray(batch["pair"]).tolist() == [[i, 10 * i] for i in want[0][:4]]

        # resume mid-epoch 0 from a state taken after two batches
        again = pipeline(make(files, 2))
        it = iter(again)
        head = ids([next(it), next(it)])
        state = again.get_state()
        resumed = pipeline(source)
        resumed.set_state(state)
        assert head + ids(resumed) == want[0]
        again.source.close()
    finally:
        source.close()


@pytest.mark.slow
def test_bad_records_are_skipped_counted_and_named_as_with_threads(files):
    bad = frozenset({4, 11, 20})
    source = make(files, 2, decode=decoder(bad), on_error="skip", max_skipped=3)
    try:
        served = ids(pipeline(source))
        assert sorted(served) == sorted(set(range(25)) - bad)
        reports = source.skipped_records()
        assert sorted(r.index for r in reports) == sorted(bad)  # stable index = record id
        assert sorted((pathlib.Path(r.path).name, r.index_in_file) for r in reports) == [
            ("part-0.array_record", 4), ("part-1.array_record", 2), ("part-2.array_record", 5)]
        assert all(r.cause == f"ValueError: record id {r.index} is bad" for r in reports)
        threads = make(files, 0, decode=decoder(bad), on_error="skip", max_skipped=3)
        assert ids(pipeline(threads)) == served
        assert source.get_state() == threads.get_state()
        assert source.host_reader.ledger.total == threads.host_reader.ledger.total == 3
        threads.close()
    finally:
        source.close()

    raising = make(files, 2, decode=decoder(frozenset({11})), shuffle_files=False)
    try:
        with pytest.raises(RecordError, match=r"record 2 of file '.*part-1\.array_record'.*"
                                              r"ValueError: record id 11 is bad"):
            ids(pipeline(raising))
    finally:
        raising.close()


def test_an_error_that_cannot_travel_back_arrives_with_its_type_and_message(files):
    class TwoArgs(Exception):  # unpicklable: __init__ wants two arguments
        def __init__(self, what, where):
            super().__init__(f"{what} at {where}")

    def decode(record: bytes) -> dict[str, np.ndarray]:
        values = np.frombuffer(record, np.int32)
        if int(values[0]) == 7:
            raise TwoArgs("broken", "id 7")
        return {"id": values[0]}

    source = make(files, 1, decode=decode, shuffle_files=False)
    try:
        with pytest.raises(RecordError, match=r"record 7 of file .*part-0.*TwoArgs: broken at id 7"):
            ids(pipeline(source))
    finally:
        source.close()


def test_a_worker_that_dies_is_reported_and_the_next_pass_starts_new_workers(files, tmp_path):
    healed = tmp_path / "healed"
    source = make(files, 1, decode=decoder(exit_on=13, unless=str(healed)), shuffle_files=False)
    try:
        loop = pipeline(source)
        served = []
        with pytest.raises(DataraxError, match="decode worker process ended.*decode_processes=0"):
            for batch in loop:
                served += ids([batch])
        assert served == list(range(len(served))) and len(served) <= 12  # before record 13
        healed.touch()
        state = loop.get_state()
        again = pipeline(source)
        again.set_state(state)  # the same position: nothing lost, nothing repeated
        assert served + ids(again) == list(range(25))
    finally:
        source.close()


def test_a_decode_that_cannot_be_sent_is_refused_at_construction(files):
    lock = threading.Lock()

    def decode(record: bytes) -> dict[str, np.ndarray]:
        with lock:
            return {"id": np.frombuffer(record, np.int32)[0]}

    with pytest.raises(ConfigError, match="decode_processes needs decode .* cannot be pickled"):
        make(files, 2, decode=decode)
    for count in (-1, True, 1.5, None):
        with pytest.raises(ConfigError, match=r"ArrayRecordSourceModule decode_processes must "
                           r"be an int >= 0 \(0: the reader threads decode\), got "):
            make(files, count)


def test_no_worker_process_outlives_close(files):
    # this test's workers: another test's source not yet collected may keep its own
    others = {p.pid for p in multiprocessing.active_children()}

    def started() -> list[int]:
        return [p.pid for p in multiprocessing.active_children() if p.pid not in others]

    source = make(files, 2)
    assert len(ids(pipeline(source))) == 25
    assert len(started()) >= 1
    source.close()
    assert started() == []


ORPHAN_PARENT = '''
import json, multiprocessing, os, sys, time
import numpy as np

def decode(record):
    return {"id": np.frombuffer(record, np.int32)[0]}

if __name__ == "__main__":
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), sys.argv[2:], decode=decode,
                                     num_threads=2, decode_processes=2)
    source.seek(0)
    assert source.get_batch(4)["id"].tolist() == [0, 1, 2, 3]
    while len(multiprocessing.active_children()) < 2:
        time.sleep(0.05)
    pids = [p.pid for p in multiprocessing.active_children()]
    print("workers started", flush=True)  # before the pid file: the test kills on seeing it
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump(pids, f)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
'''


def alive(pid: int) -> bool:
    """A process that runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
def test_workers_end_when_their_parent_is_killed(files, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script, pid_file = tmp_path / "parent.py", tmp_path / "workers.json"
    script.write_text(ORPHAN_PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file), *files],
                              env=cpu_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert parent.poll() is None, parent.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the parent never started its workers"
            time.sleep(0.05)
        workers = json.loads(pid_file.read_text())
        assert len(workers) == 2 and all(alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)
        # the output pipe ends once the workers, which share it, have ended too
        output = parent.communicate(timeout=60)[0].decode()
        assert parent.returncode == -signal.SIGKILL and "workers started" in output
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in workers if alive(pid)] == []
    finally:
        parent.kill()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


FORKED_CHILD = '''
import os, sys, time
import numpy as np

def decode(record):
    return {"id": np.frombuffer(record, np.int32)[0]}

if __name__ == "__main__":
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), sys.argv[2:], decode=decode,
                                     num_threads=2, decode_processes=1)
    source.seek(0)
    assert source.get_batch(4)["id"].tolist() == [0, 1, 2, 3]  # the workers run
    pid = os.fork()  # a torch-style worker pool, a notebook's multiprocessing
    if pid == 0:
        with open(sys.argv[1], "w") as f:
            f.write(" ".join(map(str, source.get_batch(4)["id"].tolist())))
        os._exit(0)
    deadline = time.monotonic() + 100  # (a bound on failure only)
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            sys.exit("the forked child hung on the parent's decode workers")
        time.sleep(0.05)
    print("parent", source.get_batch(4)["id"].tolist(), flush=True)
    source.close()
'''


def test_a_forked_child_decodes_with_workers_of_its_own(files, tmp_path):
    # the child inherits the parent's pool object, but not its threads or workers:
    # reading through it waited forever; the child now starts workers of its own
    got = tmp_path / "child.txt"
    run = run_script(tmp_path / "fork.py", FORKED_CHILD, got, *files)
    assert run.returncode == 0, run.stderr[-3000:]
    assert got.read_text() == "4 5 6 7"  # where the parent was
    assert "parent [4, 5, 6, 7]" in run.stdout  # the parent's own position is its own
