"""HFStreamingSource read ahead on the pipeline's worker thread: the same batches, errors
and skips as reading on the consumer's thread, and the source's position (and skip
count) is at every moment what was handed out. (A restore under a live iterator and
a direct read between batches are in the conformance table: ``check_restore_live``,
``check_direct_read_live``.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from flax import nnx

datasets = pytest.importorskip("datasets")
pytest.importorskip("pyarrow.parquet")

from datarax.core.errors import DataraxError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import HFStreamingConfig, HFStreamingSource  # noqa: E402
from datarax.testing import json_round_trip  # noqa: E402
from hf_files import int32_lists, position_of, write_parquet  # noqa: E402
from waiting import eventually  # noqa: E402

N = 60
BAD = (13, 14, 41)  # lists of another length: skipped under on_error="skip"
GOOD = [i for i in range(N) if i not in BAD]


pytestmark = pytest.mark.usefixtures("hf_offline")


@pytest.fixture
def data(tmp_path) -> str:
    vec = [[i, i] for i in range(N)]
    for i in BAD:
        vec[i] = [i, i, i]
    return write_parquet(tmp_path / "train.parquet", {
        "idx": np.arange(N, dtype=np.int32),
        "vec": int32_lists(vec),
        "text": [f"record {i}" for i in range(N)],
    })


def pipeline(path: str, prefetch: int = 2, batch_size: int = 8, drop_remainder: bool = False,
             **config) -> Pipeline:
    config = {"chunk_size": 10, "on_error": "skip", **config}
    source = HFStreamingSource(HFStreamingConfig(name="parquet", data_files=path, **config))
    return Pipeline(source=source, stages=[], batch_size=batch_size, prefetch=prefetch,
                    drop_remainder=drop_remainder, rngs=nnx.Rngs(0))


def ids(batch) -> list[int]:
    return np.asarray(batch["idx"]).tolist()


def epochs(p: Pipeline, count: int = 2) -> list[list[int]]:
    return [ids(b) for _ in range(count) for b in p]


def _read_ahead_of(source, handed_out: int) -> int:
    """Records the worker read past what was handed out (waits for it)."""
    reader = source._reader
    eventually(lambda: reader.read_to > handed_out)  # at once, unless the machine is loaded
    return reader.read_to - handed_out


def _workers(threads) -> set[str]:
    return {t.name for t in threads if t.is_alive() and t.name == "datarax-dispatch"}


@pytest.mark.parametrize("prefetch", [1, 3])
@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_read_ahead_serves_the_batches_read_on_the_consumers_thread(
    data, prefetch, drop_remainder, shuffle
) -> None:
    kw = {"drop_remainder": drop_remainder, "shuffle": shuffle, "seed": 5,
          "shuffle_buffer_size": 16}
    ahead = epochs(pipeline(data, prefetch, **kw))
    assert ahead == epochs(pipeline(data, 0, **kw))
    first_pass = sorted(v for batch in ahead[: len(ahead) // 2] for v in batch)
    if drop_remainder:
        assert len(first_pass) == len(GOOD) // 8 * 8 and set(first_pass) <= set(GOOD)
    else:
        assert first_pass == GOOD


def test_text_fields_are_lists_of_str_when_read_ahead(data) -> None:
    batch = next(iter(pipeline(data, prefetch=2)))
    assert batch["text"] == [f"record {i}" for i in range(8)]


def test_source_state_is_what_was_handed_out_while_batches_are_read_ahead(data) -> None:
    p = pipeline(data, prefetch=3)
    source = p.source
    it = iter(p)
    head = [ids(next(it)) for _ in range(2)]
    assert head[1] == [8, 9, 10, 11, 12, 15, 16, 17]  # passes the bad 13 and 14
    assert position_of(source.get_state()) == {"current_index": 18, "current_epoch": 0, "skipped": 2}
    assert _read_ahead_of(source, 18) > 0  # the worker did read on ...
    assert position_of(source.get_state()) == {"current_index": 18, "current_epoch": 0, "skipped": 2}
    state = json_round_trip(source.get_state())
    rest = [ids(b) for b in it]

    fresh = pipeline(data, prefetch=3)
    fresh.source.set_state(state)  # the seed's promise: the source's own state resumes
    assert [ids(b) for b in fresh] == rest
    assert [r.index for r in fresh.source.skipped_records()] == [41]  # the one it passed
    assert head + rest == epochs(pipeline(data, 0), 1)


def test_a_bad_record_raises_at_its_batch_after_the_batches_before_it(data) -> None:
    for prefetch in (0, 3):
        before = set(threading.enumerate())
        p = pipeline(data, prefetch, on_error="raise", chunk_size=4, batch_size=4)
        it = iter(p)
        assert [ids(next(it)) for _ in range(3)][-1] == [8, 9, 10, 11]
        for _ in range(2):  # a retry meets the same record again
            with pytest.raises(DataraxError, match="field 'vec' holds lists of different "
                               r"lengths \(record 12 has 2, record 13 has 3\)"):
                next(it)
            assert p.source.get_state()["current_index"] == 12  # the failing batch not handed out
            assert _workers(set(threading.enumerate()) - before) == set()  # released at once


def test_skips_read_ahead_are_counted_once_when_passed(data) -> None:
    p = pipeline(data, prefetch=3)
    source = p.source
    it = iter(p)
    next(it)  # records 0..7; the worker reads past 13 and 14, maybe 41
    _read_ahead_of(source, 8)
    assert source.get_state()["skipped"] == 0 and source.skipped_records() == []
    next(it)  # passes 13 and 14
    assert source.get_state()["skipped"] == 2
    assert [r.index for r in source.skipped_records()] == [13, 14]
    rest = list(it)
    assert sum(len(ids(b)) for b in rest) == len(GOOD) - 16
    assert [r.index for r in source.skipped_records()] == [13, 14, 41]
    # the pass ended: the state is the start of epoch 1
    assert position_of(source.get_state()) == {"current_index": 0, "current_epoch": 1, "skipped": 0}


def test_the_worker_ends_with_the_pass_and_with_a_closed_iterator(data) -> None:
    before = set(threading.enumerate())
    p = pipeline(data, prefetch=2)
    for _ in p:
        pass
    it = iter(p)
    next(it)
    it.close()
    assert p.source.get_state()["current_index"] == 8  # what was handed out, not read
    it = iter(p)  # the next pass
    assert ids(next(it)) == list(range(8))
    del it
    eventually(lambda: not _workers(set(threading.enumerate()) - before))
    assert _workers(set(threading.enumerate()) - before) == set()
