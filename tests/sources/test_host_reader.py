"""HostReader: order, batching, resume, read-ahead bounds, bad-record policy, clean close."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from waiting import eventually

from datarax.core.errors import ConfigError, RecordError
from datarax.samplers import index_shuffle_np
from datarax.sources.host_reader import HostReader
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.skip_ledger import ErrorPolicy


class Table:
    """A random-access object of int32 records; some indices fail to read."""

    def __init__(self, n: int, bad: tuple[int, ...] = ()) -> None:
        self.n = n
        self.bad = set(bad)
        self.getitems_calls = 0
        self.reads: list[list[int]] = []  # the keys of each batched read, in order
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> bytes:
        if i in self.bad:
            raise OSError(f"checksum mismatch at {i}")
        return np.int32(i).tobytes()

    def __getitems__(self, keys: list[int]) -> list[bytes]:
        with self.lock:
            self.getitems_calls += 1
            self.reads.append([int(k) for k in keys])
        return [self[k] for k in keys]


def decode(raw: bytes) -> dict[str, np.ndarray]:
    return {"x": np.frombuffer(raw, np.int32)[0], "pair": np.frombuffer(raw * 2, np.int32)}


def locate(i: int) -> tuple[str, int]:
    return f"f{i // 10}.ar", i % 10


def drain(reader: HostReader, batch_size: int) -> tuple[list[list[int]], list[int]]:
    batches, ends = [], []
    while (b := reader.next_batch(batch_size)) is not None:
        assert b.columns["x"].tolist() == b.indices.tolist()
        assert b.columns["pair"].shape == (len(b), 2)
        batches.append(b.indices.tolist())
        ends.append(b.end)
    return batches, ends


def test_sequential_batches_and_end():
    reader = HostReader(Table(10), decode, num_threads=2)
    reader.start(EpochOrder(10, None, 0))
    batches, ends = drain(reader, 4)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert ends == [4, 8, 10]
    assert reader.position == 10
    reader.close()


def test_shuffled_order_is_grain_permutation_and_epoch_reseeds():
    grain = pytest.importorskip("grain")
    n = 37
    reader = HostReader(Table(n), decode, num_threads=2)
    reader.start(EpochOrder(n, 42, 1))
    got = sum(drain(reader, 8)[0], [])
    want = [grain.experimental.index_shuffle(i, max_index=n - 1, seed=43, rounds=4) for i in range(n)]
    assert got == want
    reader.start(EpochOrder(n, 43, 0))
    assert sum(drain(reader, 5)[0], []) == want
    assert sorted(got) == list(range(n))
    reader.close()


def test_shard_block_of_shuffled_order():
    n = 20
    full = index_shuffle_np(np.arange(n), n - 1, 7 + 2).tolist()
    reader = HostReader(Table(n), decode)
    reader.start(EpochOrder(n, 7, 2, lo=10, hi=20))
    assert sum(drain(reader, 3)[0], []) == full[10:20]
    reader.close()


@pytest.mark.parametrize("batch_size", [1, 3, 64, 100])
def test_resume_at_every_handed_out_position(batch_size):
    n = 23
    order = EpochOrder(n, 5, 0)
    reader = HostReader(Table(n), decode, num_threads=2, read_ahead=2, chunk_size=4)
    reader.start(order)
    full, ends = drain(reader, batch_size)
    flat = sum(full, [])
    for cut in [0] + ends:
        reader.start(order, position=cut)
        rest = sum(drain(reader, batch_size)[0], [])
        assert flat[:cut] + rest == flat
    reader.close()


def test_batches_span_chunks_and_use_batched_reads():
    table = Table(50)
    reader = HostReader(table, decode, chunk_size=8, read_ahead=3, read_next_epoch=False)
    reader.start(EpochOrder(50, None, 0))
    batches, _ = drain(reader, 20)
    assert [len(b) for b in batches] == [20, 20, 10]
    assert sum(batches, []) == list(range(50))
    assert table.getitems_calls == 7  # ceil(50 / 8) chunk reads, no per-record reads
    reader.close()


def test_read_ahead_is_bounded():
    table = Table(1000)
    reader = HostReader(table, decode, num_threads=2, read_ahead=3, chunk_size=10)
    reader.start(EpochOrder(1000, None, 0))
    reader.next_batch(10)
    assert eventually(lambda: reader.ready(30))  # the 3 reads ahead land
    assert reader.read_ahead_records() == 30
    assert table.getitems_calls <= 1 + 3  # the batch's chunk and 3 ahead, no more
    reader.close()


def test_threads_are_joined_on_stop_close_and_epoch_end():
    # ours: threads other tests left may end meanwhile, and one their garbage starts
    # (an iterator collected on a reader thread releases on a thread of its own) may begin
    before = set(threading.enumerate())

    def started() -> int:
        return sum(t not in before and t.name.startswith("source-reader")
                   for t in threading.enumerate())

    reader = HostReader(Table(100), decode, num_threads=3)
    reader.start(EpochOrder(100, None, 0))
    reader.next_batch(10)
    assert started() > 0
    reader.stop()
    assert started() == 0
    reader.start(EpochOrder(100, None, 1))
    drain(reader, 30)
    assert started() > 0  # the epoch's end: epoch 2's first reads go on
    reader.stop()
    assert started() == 0  # stop() drops them too
    reader.start(EpochOrder(100, None, 2))
    reader.next_batch(10)
    reader.close()
    assert started() == 0
    alone = HostReader(Table(100), decode, num_threads=3, read_next_epoch=False)
    alone.start(EpochOrder(100, None, 0))
    drain(alone, 30)
    assert started() == 0  # nothing to read next: the end releases the pool
    alone.close()
    with pytest.raises(RuntimeError, match="closed"):
        reader.start(EpochOrder(100, None, 0))


def test_raise_policy_names_file_index_and_cause():
    reader = HostReader(Table(30, bad=(13,)), decode, locate=locate, name="Src")
    reader.start(EpochOrder(30, None, 0))
    assert reader.next_batch(10).indices.tolist() == list(range(10))
    with pytest.raises(RecordError) as info:
        reader.next_batch(10)
    err = info.value
    assert (err.path, err.index) == ("f1.ar", 3)
    assert "Src: cannot read record 3 of file 'f1.ar' (epoch 0): OSError: checksum mismatch at 13" in str(err)
    assert "on_error='skip'" in str(err)
    reader.close()


def test_decode_errors_and_structure_changes_are_record_errors():
    def bad_decode(raw):
        i = int(np.frombuffer(raw, np.int32)[0])
        if i == 4:
            raise ValueError("bad jpeg")
        if i == 6:
            return [i]
        if i == 8:
            return {"x": np.zeros(3, np.int32), "pair": np.zeros(2, np.int32)}
        if i == 9:
            return {"y": np.int32(1)}
        return decode(raw)

    reader = HostReader(Table(10), bad_decode, locate=locate, policy=ErrorPolicy("skip"))
    reader.start(EpochOrder(10, None, 0))
    assert sum(drain(reader, 4)[0], []) == [0, 1, 2, 3, 5, 7]
    causes = {r.index: r.cause for r in reader.skipped_records()}
    assert causes[4] == "ValueError: bad jpeg"
    assert causes[6] == "decode returned list, expected a dict of arrays (e.g. {'image': np.frombuffer(record, np.uint8)})"
    assert causes[8] == (
        "field 'x' decodes to int32(3,), the first record's is int32(); every record must "
        "decode to the same shapes and dtypes"
    )
    assert causes[9] == "decode returned fields ['y'], the first record (record 0) has ['x', 'pair']"
    reader.close()


def test_a_record_differing_after_its_first_axis_is_named():
    """A chunk's records are checked as a whole (the first axis of each, the rest by the
    stacking): one that differs only in a later axis, holds a scalar, a 0-d array or an
    extra axis is still found and named, and the others are stacked as decoded."""
    odd = {3: np.zeros((2, 4), np.int32), 5: np.int32(7), 6: np.array(7, np.int32),
           8: np.zeros((2, 3, 1), np.int32), 9: np.zeros((3, 3), np.int32)}

    def grid_decode(raw):
        i = int(np.frombuffer(raw, np.int32)[0])
        return {"x": np.int32(i), "grid": odd.get(i, np.full((2, 3), i, np.int32))}

    reader = HostReader(Table(10), grid_decode, locate=locate, policy=ErrorPolicy("skip"))
    reader.start(EpochOrder(10, None, 0))
    read = reader.next_batch(10)
    assert read.indices.tolist() == [0, 1, 2, 4, 7]
    assert read.columns["grid"].tolist() == [np.full((2, 3), i).tolist() for i in (0, 1, 2, 4, 7)]
    assert reader.next_batch(10) is None  # the end: the skips after record 7 count
    causes = {r.index: r.cause for r in reader.skipped_records()}
    assert {i: causes[i].split(";")[0] for i in causes} == {
        3: "field 'grid' decodes to int32(2, 4), the first record's is int32(2, 3)",
        5: "field 'grid' decodes to int32(), the first record's is int32(2, 3)",
        6: "field 'grid' decodes to int32(), the first record's is int32(2, 3)",
        8: "field 'grid' decodes to int32(2, 3, 1), the first record's is int32(2, 3)",
        9: "field 'grid' decodes to int32(3, 3), the first record's is int32(2, 3)",
    }
    reader.close()


def test_skip_policy_counts_reports_and_resumes_exactly():
    bad = (2, 3, 11, 19)
    order = EpochOrder(20, None, 0)
    reader = HostReader(Table(20, bad=bad), decode, locate=locate, chunk_size=4,
                        policy=ErrorPolicy("skip", max_skipped=4))
    reader.start(order)
    batches, ends = drain(reader, 5)
    flat = sum(batches, [])
    assert flat == [i for i in range(20) if i not in bad]
    assert [len(b) for b in batches] == [5, 5, 5, 1]
    assert reader.skipped == 4
    assert [(r.path, r.index_in_file, r.position) for r in reader.skipped_records()] == [
        ("f0.ar", 2, 2), ("f0.ar", 3, 3), ("f1.ar", 1, 11), ("f1.ar", 9, 19)]
    # Resume at each handed-out end with the skips committed before it.
    assert ends == [7, 13, 18, 19]
    for cut, skipped_before in zip(ends, [2, 3, 3, 3]):
        fresh = HostReader(Table(20, bad=bad), decode, chunk_size=3,
                           policy=ErrorPolicy("skip", max_skipped=4))
        fresh.start(order)
        while fresh.position < cut:
            fresh.next_batch(5)
        assert fresh.skipped == skipped_before
        fresh.start(order, position=cut, skipped=fresh.skipped)
        rest = sum(drain(fresh, 5)[0], [])
        assert flat[: flat.index(rest[0]) if rest else len(flat)] + rest == flat
        assert fresh.skipped == 4
        fresh.close()
    reader.close()


def test_skip_budget_exceeded_raises():
    reader = HostReader(Table(20, bad=(1, 5, 9)), decode, locate=locate,
                        policy=ErrorPolicy("skip", max_skipped_fraction=0.1))
    reader.start(EpochOrder(20, None, 0))
    with pytest.raises(RecordError, match=r"skipped 3 bad records in epoch 0, over the budget of 2"):
        drain(reader, 4)
    # A resume that already counted two skips hits the budget at the next one.
    reader.start(EpochOrder(20, None, 0), position=6, skipped=2)
    with pytest.raises(RecordError, match="record 9 of file 'f0.ar'"):
        drain(reader, 4)
    reader.close()


def test_policy_and_argument_validation():
    with pytest.raises(ConfigError, match="on_error must be one of"):
        ErrorPolicy("ignore")
    with pytest.raises(ConfigError, match="max_skipped must be an int >= 0 or None"):
        ErrorPolicy("skip", max_skipped=-1)
    with pytest.raises(ConfigError, match=r"max_skipped_fraction must be None or a number in \[0, 1\]"):
        ErrorPolicy("skip", max_skipped_fraction=1.5)
    with pytest.raises(ConfigError, match="only apply with on_error='skip'"):
        ErrorPolicy("raise", max_skipped=3)
    with pytest.raises(ConfigError, match="num_threads must be an int >= 1"):
        HostReader(Table(3), decode, num_threads=0)
    with pytest.raises(ConfigError, match="decode must be callable"):
        HostReader(Table(3), "nope")  # type: ignore[arg-type]


def test_element_spec_from_first_record_and_text_fields():
    reader = HostReader(Table(3), lambda raw: {"x": np.frombuffer(raw, np.int32), "s": "a"})
    spec = reader.element_spec()
    assert spec["x"].shape == (1,) and spec["x"].dtype == np.int32
    assert type(spec["s"]).__name__ == "TextSpec"
    reader.start(EpochOrder(3, None, 0))
    assert reader.next_batch(3).columns["s"].tolist() == ["a", "a", "a"]
    reader.close()


@pytest.mark.parametrize("n", [20, 1000, 20_000, 65535])
def test_epoch_order_equals_grains_cycle_walking(n):
    from grain.experimental import index_shuffle as grain_index_shuffle

    sample = np.linspace(0, n - 1, 97).astype(np.int64)
    order = EpochOrder(length=n, seed=9, epoch=0)
    expected = [grain_index_shuffle(index=int(i), max_index=n - 1, seed=9, rounds=4) for i in sample]
    assert order.indices(0, n)[sample].tolist() == expected


from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    bad=st.sets(st.integers(0, 59), max_size=8),
    batch_size=st.integers(1, 9),
    chunk_size=st.integers(1, 12),
    read_ahead=st.integers(1, 3),
    shuffle=st.booleans(),
    cut=st.integers(0, 20),
)
def test_resume_anywhere_with_skips_matches_the_uninterrupted_run(
    n, bad, batch_size, chunk_size, read_ahead, shuffle, cut
):
    bad = tuple(b for b in bad if b < n)
    assume(len(bad) < n)  # at least one good record (the first one fixes the fields)
    order = EpochOrder(n, 3 if shuffle else None, 1)

    def reader():
        return HostReader(Table(n, bad=bad), decode, num_threads=2, read_ahead=read_ahead,
                          chunk_size=chunk_size, policy=ErrorPolicy("skip"))

    full = reader()
    full.start(order)
    batches, _ = drain(full, batch_size)
    full.close()
    flat = sum(batches, [])
    assert sorted(flat) == sorted(set(range(n)) - set(bad))
    assert all(len(b) == batch_size for b in batches[:-1])
    first = reader()
    first.start(order)
    head = []
    for _ in range(cut):
        b = first.next_batch(batch_size)
        if b is None:
            break
        head += b.indices.tolist()
    position, skipped = first.position, first.skipped
    first.close()
    second = reader()
    second.start(order, position=position, skipped=skipped)
    tail = sum(drain(second, batch_size)[0], [])
    assert head + tail == flat
    assert second.skipped == len(bad) and second.position == n
    second.close()


def test_no_readable_record_under_skip():
    reader = HostReader(Table(3, bad=(0, 1, 2)), decode, locate=locate, policy=ErrorPolicy("skip"))
    with pytest.raises(RecordError, match="none of the first 3 records could be read and decoded") as info:
        reader.element_spec()
    # the source skips already: the message does not tell it to construct it with on_error='skip'
    assert "on_error" not in str(info.value)
    assert str(info.value).endswith("Fix or regenerate the file, or the decode if it is what raised.")


def test_peeked_batches_move_the_cursor_and_commits_move_the_position():
    reader = HostReader(Table(20, bad=(5,)), decode, locate=locate, num_threads=2,
                        policy=ErrorPolicy("skip"))
    reader.start(EpochOrder(length=20, seed=None, epoch=0))
    peeked = [reader.peek_batch(4) for _ in range(3)]
    assert [p.columns["x"].tolist() for p in peeked] == [[0, 1, 2, 3], [4, 6, 7, 8], [9, 10, 11, 12]]
    assert (reader.cursor, reader.position, reader.skipped) == (13, 0, 0)  # nothing handed out
    reader.commit(peeked[0].end)
    assert (reader.position, reader.skipped) == (4, 0)
    reader.commit(peeked[1].end)  # passes the bad record 5: counted now, once
    assert (reader.position, reader.skipped, [r.index for r in reader.skipped_records()]) == (9, 1, [5])
    # next_batch continues from the position, not from the batches peeked past it
    assert reader.next_batch(4).columns["x"].tolist() == [9, 10, 11, 12]
    assert reader.ledger.total == 1
    reader.close()


def test_a_peek_for_an_ended_session_is_refused():
    from datarax.core.cursor import SessionEnded

    reader = HostReader(Table(10), decode, num_threads=1)
    reader.start(EpochOrder(length=10, seed=None, epoch=0))
    session = reader.session
    assert reader.peek_batch(4, session).columns["x"].tolist() == [0, 1, 2, 3]
    reader.start(EpochOrder(length=10, seed=None, epoch=0), position=2)
    with pytest.raises(SessionEnded, match=r"the reading session \d+ ended"):
        reader.peek_batch(4, session)
    assert reader.peek_batch(4, reader.session).columns["x"].tolist() == [2, 3, 4, 5]
    reader.stop()
    assert reader.session != session and not reader.active
    with pytest.raises(RuntimeError, match=r"call start\(order\) before"):
        reader.peek_batch(4)
    reader.close()


# ------------------------------------------------- the next epoch, read ahead
def reader_threads(name: str) -> int:
    return sum(t.name.startswith(f"{name}-reader") for t in threading.enumerate())


def test_epochs_in_a_row_are_single_epoch_runs_and_the_next_start_is_read_once():
    n, size, bad = 103, 10, (7, 60)
    table = Table(n, bad=bad)

    def make() -> HostReader:
        return HostReader(table, decode, num_threads=2, read_ahead=3, chunk_size=8,
                          policy=ErrorPolicy("skip"))

    alone = []
    for epoch in range(3):  # each epoch by a reader of its own
        with make() as reader:
            reader.start(EpochOrder(n, 5, epoch))
            alone.append((drain(reader, size)[0], reader.skipped))
    table.reads.clear()
    with make() as reader:  # the three in a row: the next one's start read ahead
        for epoch in range(3):
            reader.start(EpochOrder(n, 5, epoch))
            assert (drain(reader, size)[0], reader.skipped) == alone[epoch]
        assert [r.epoch for r in reader.skipped_records()] == [0, 0, 1, 1, 2, 2]
    for epoch in (1, 2):  # taken over by the epoch's start, not read again
        first = EpochOrder(n, 5, epoch).indices(0, 8).tolist()
        assert table.reads.count(first) == 1
    assert all(sorted(sum(a[0], [])) == sorted(set(range(n)) - set(bad)) for a in alone)


def test_the_next_epochs_reads_start_before_the_last_batch_is_taken():
    table = Table(100)
    reader = HostReader(table, decode, num_threads=2, read_ahead=2, chunk_size=10)
    reader.start(EpochOrder(100, 3, 0))
    for _ in range(8):
        reader.next_batch(10)
    eventually(lambda: reader.ready(20))  # the epoch's reads done
    reader.next_batch(10)  # all but the last batch: a reader thread is free for the next
    first = EpochOrder(100, 3, 1).indices(0, 10).tolist()
    assert eventually(lambda: first in table.reads)  # on a reader thread
    assert reader.position == 90
    assert len(reader.next_batch(10)) == 10 and reader.next_batch(10) is None
    reader.start(EpochOrder(100, 3, 1))
    assert reader.next_batch(10).indices.tolist() == first
    assert table.reads.count(first) == 1
    reader.close()


def test_a_start_elsewhere_a_move_elsewhere_or_stop_drops_the_next_epochs_reads():
    def fresh(order: EpochOrder, position: int = 0) -> list[list[int]]:
        with HostReader(Table(100), decode, chunk_size=10) as other:
            other.start(order, position)
            return drain(other, 10)[0]

    reader = HostReader(Table(100), decode, num_threads=2, read_ahead=2, chunk_size=10,
                        name="ahead")
    for start, position in ((EpochOrder(100, 3, 4), 0), (EpochOrder(100, 3, 1), 30),
                            (EpochOrder(100, None, 1), 0)):
        reader.start(EpochOrder(100, 3, 0))
        drain(reader, 10)
        reader.start(start, position)  # not the epoch read ahead, or not its start
        assert drain(reader, 10)[0] == fresh(start, position)
    reader.moved_to(2, 0)  # where the reads left running are (epoch 2's start): kept
    assert reader_threads("ahead") > 0
    reader.moved_to(3, 0)  # elsewhere: dropped, the threads joined
    assert reader_threads("ahead") == 0
    reader.start(EpochOrder(100, None, 2))
    drain(reader, 10)
    reader.stop()
    assert reader_threads("ahead") == 0
    reader.close()


def test_learning_in_the_first_read_fetches_record_0_with_the_first_batch():
    # remote files: record 0 (the structure) in the batch's own read, no read at start
    table = Table(40)
    order = EpochOrder(40, 0, 0)
    # the next epoch's reads off: once this epoch's are done they may read record 0 again
    reader = HostReader(table, decode, locate=locate, learn_in_first_read=True,
                        read_next_epoch=False)
    reader.start(order)
    assert table.reads == []
    first = reader.next_batch(8)
    expected = order.indices(0, 8).tolist()
    assert 0 not in expected
    assert first.indices.tolist() == first.columns["x"].tolist() == expected
    assert table.reads[0] == [0, *expected]  # one read: record 0, then the batch's
    assert reader.element_spec()["pair"].shape == (2,)
    rest = sum(drain(reader, 8)[0], [])
    assert sorted(expected + rest) == list(range(40))  # each record once, record 0 too
    assert sum(r.count(0) for r in table.reads) == 2  # learned once, served once
    reader.close()


def test_learning_in_the_first_read_names_an_unreadable_record_0_at_the_first_batch():
    reader = HostReader(Table(30, bad=(0,)), decode, locate=locate, name="Src",
                        learn_in_first_read=True)
    reader.start(EpochOrder(30, None, 0))  # reads nothing, so raises nothing yet
    with pytest.raises(RecordError) as info:
        reader.next_batch(10)
    assert (info.value.path, info.value.index) == ("f0.ar", 0)
    assert "Src: cannot read record 0 of file 'f0.ar': OSError: checksum mismatch at 0" in str(
        info.value)
    assert "on_error='skip'" in str(info.value)
    reader.close()


def test_learning_in_the_first_read_skips_a_bad_record_0_as_learning_at_start_does():
    served = []
    for learn_in_first_read in (False, True):
        reader = HostReader(Table(20, bad=(0, 5)), decode, locate=locate,
                            policy=ErrorPolicy("skip"), learn_in_first_read=learn_in_first_read)
        reader.start(EpochOrder(20, 3, 0))
        batches, ends = drain(reader, 6)
        served.append((batches, ends, reader.skipped, [
            (r.path, r.index_in_file, r.position) for r in reader.skipped_records()]))
        reader.close()
    assert served[0] == served[1]
    assert served[1][2] == 2 and sorted(sum(served[1][0], [])) == [
        i for i in range(20) if i not in (0, 5)]
