"""A reading session belongs to the pass that opened it (issue 46, item 6).

Two passes over one host source in turn: the first one's iterator, abandoned, may be
collected by the garbage collector at any time, on any thread. Its release ends its own
session only, never the second pass's reading; and a session that does end under a
pass's read-ahead (another thread moved or released the source) costs a re-read from
the position, never an internal error or a batch served twice.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

from int_record_files import write_int_parts
from waiting import eventually


def decode(record: bytes) -> dict:
    return {"x": np.frombuffer(record, np.int32)[0]}


def make(files, decode_fn=decode):
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=1, shuffle_files=True), files,
                                   decode=decode_fn, num_threads=2)


def ids(batch) -> list[int]:
    return np.asarray(batch["x"]).tolist()


def one_pass(files) -> list[int]:
    """The records of an uninterrupted pass, in order."""
    source = make(files)
    out = [i for batch in Pipeline(source=source, stages=[], batch_size=4) for i in ids(batch)]
    source.close()
    return out


def test_an_older_cursors_release_leaves_the_newer_session_reading(tmp_path):
    files = write_int_parts(tmp_path, [7, 12, 20])
    source = make(files)
    old = source.batch_cursor()
    head = old.peek(4)[0]["x"].tolist()
    old.commit(4)
    newer = source.batch_cursor()  # the next pass takes over from the position
    old.release()  # the abandoned pass lets go, late: its session only
    old.release()  # twice is harmless
    assert not old.current and newer.current
    rest = []
    while (read := newer.peek(4)) is not None:
        rest += read[0]["x"].tolist()
        newer.commit(read[2])
    assert head + rest == one_pass(files)
    newer.release()
    assert not newer.current
    source.close()


def test_an_iterator_collected_on_another_thread_mid_pass_of_the_next_one(tmp_path):
    # The interleaving seen under load: the garbage collector runs on a thread other than
    # the loop's (a reader thread, say) while the second pipeline reads; the first
    # iterator is released there, in the middle of the second pass.
    files = write_int_parts(tmp_path, [7, 12, 20])
    source = make(files)
    first = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    it = iter(first)
    head = ids(next(it))
    cycle = [it]
    cycle.append(cycle)  # only the garbage collector frees it now
    del it, cycle
    second = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    second.set_state(first.get_state())
    rest = []
    for k, batch in enumerate(second):
        rest += ids(batch)
        if k == 1:
            collector = threading.Thread(target=gc.collect)
            collector.start()
            collector.join()
            # the release it started, done (a thread still starting is listed too, and
            # cannot be joined yet: wait until none is left)
            assert eventually(lambda: not [t for t in threading.enumerate()
                                           if t.name == "datarax-release"])
    assert head + rest == one_pass(files)
    source.close()


def test_a_session_ended_under_the_read_ahead_is_read_again_from_the_position(tmp_path):
    # While the read-ahead thread reads the third batch, another thread ends the reading
    # session (here close_epoch, as a late release of another pass once did): the pass
    # reads again from what it handed out; no batch twice, no internal error.
    source = None
    ended = []

    def decode_and_interfere(record: bytes) -> dict:
        out = decode(record)
        if not ended and len(seen) >= 8:  # the first record read after two batches
            ended.append(threading.Thread(target=source.close_epoch))
            ended[0].start()
        seen.append(int(out["x"]))
        return out

    seen: list[int] = []
    files = write_int_parts(tmp_path, [7, 12, 20])
    source = make(files, decode_and_interfere)
    source.element_spec()
    seen.clear()
    pipeline = Pipeline(source=source, stages=[], batch_size=4, prefetch=1, rngs=nnx.Rngs(0))
    served = [ids(batch) for batch in pipeline]
    assert ended, "the session was never ended under the pass"
    ended[0].join()
    assert [i for batch in served for i in batch] == one_pass(files)
    source.close()
