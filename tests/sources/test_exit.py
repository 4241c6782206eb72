"""At interpreter exit a host reader's read-ahead holds nothing up: after an uncaught
error (Ctrl-C) only the chunks being read finish, the chunks queued behind them are
dropped; a program whose main script ends while its own thread still reads gets every
record. Each case runs a fresh Python process (docs/reliability.md, "At exit")."""

from __future__ import annotations

import pytest
from fresh_process import run_script

THREADS, CHUNK, AHEAD, RECORDS = 2, 4, 16, 400
# seconds a record's decode takes: a thread takes a third chunk after the raise only if
# the exit starts more than two chunks' decode (8 * DECODE_S) after it; at 0.02 s (0.16 s)
# a loaded CI machine that kept the main thread waiting for a core could do that
DECODE_S = 0.1

SCRIPT = '''
import os, sys, threading, time
import numpy as np

mode, log, raised = sys.argv[1:4]

def decode(record):
    with open(log, "a") as f:  # when each record's decode started
        f.write(f"{time.time()}\\n")
    time.sleep(DECODE_S if mode != "main-ends" else 0)
    return {"x": np.frombuffer(record, np.int32)[0]}

def read_all(reader):
    from datarax.sources.epoch_order import EpochOrder
    reader.start(EpochOrder(length=len(reader), seed=None, epoch=0))
    got = []
    while (batch := reader.next_batch(40)) is not None:
        got.extend(batch.columns["x"].tolist())
    with open(raised, "w") as f:  # (the records read)
        f.write(" ".join(map(str, got)))

if __name__ == "__main__":
    from datarax.sources.epoch_order import EpochOrder
    from datarax.sources.host_reader import HostReader
    data = [np.int32(i).tobytes() for i in range(RECORDS)]
    reader = HostReader(data, decode, num_threads=THREADS, read_ahead=AHEAD, chunk_size=CHUNK,
                        decode_processes=THREADS if mode == "processes" else 0,
                        read_next_epoch=False)
    if mode == "main-ends":
        threading.Thread(target=read_all, args=(reader,)).start()
    else:
        reader.start(EpochOrder(length=len(data), seed=None, epoch=0))
        reader.next_batch(CHUNK)
        with open(raised, "w") as f:
            f.write(str(time.time()))
        raise KeyboardInterrupt
'''.replace("RECORDS", str(RECORDS)).replace("THREADS", str(THREADS)).replace(
    "CHUNK", str(CHUNK)).replace("AHEAD", str(AHEAD)).replace("DECODE_S", str(DECODE_S))


def run(tmp_path, mode: str) -> tuple[list[float], str]:
    """When each record's decode started, and what the script wrote: the time it raised
    Ctrl-C's error, or (mode "main-ends") the records its thread read."""
    log, raised = tmp_path / "decoded", tmp_path / "raised"
    done = run_script(tmp_path / "main.py", SCRIPT, mode, log, raised, timeout=120)
    assert raised.exists(), done.stderr[-3000:]
    starts = [float(line) for line in log.read_text().split()] if log.exists() else []
    return starts, raised.read_text()


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_after_ctrl_c_only_the_chunks_being_read_finish(tmp_path, mode):
    starts, raised = run(tmp_path, mode)
    late = [t for t in starts if t > float(raised)]
    # AHEAD chunks were queued: once the interpreter exits only the chunks being read
    # finish (one a thread; one more each where a thread took a chunk between the raise
    # and the exit's start), never the queue behind them
    assert len(late) <= 2 * THREADS * CHUNK, (len(late), len(starts))
    assert len(starts) < RECORDS


def test_a_thread_still_reading_after_the_main_script_ended_gets_every_record(tmp_path):
    starts, got = run(tmp_path, "main-ends")
    assert [int(x) for x in got.split()] == list(range(RECORDS))
