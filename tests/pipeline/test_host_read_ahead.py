"""Host sources read ahead on the pipeline's worker thread: the same batches, errors and
skips as reading on the consumer's thread, and the source's position (and skip count)
is at every moment what was handed out."""

from __future__ import annotations

import pathlib
import threading

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import RecordError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

from int_record_files import write_int_parts
from waiting import eventually

N = 100
BAD = {13, 14, 57}  # records whose decode fails


def write(tmp: pathlib.Path, n: int = N) -> list[str]:
    return write_int_parts(tmp, (40, n))


def decode(record: bytes) -> dict[str, np.ndarray]:
    value = int(np.frombuffer(record, np.int32)[0])
    if value in BAD:
        raise ValueError(f"record {value} is bad")
    return {"x": np.float32(value)}


def pipeline(paths, prefetch: int = 2, batch_size: int = 8, drop_remainder: bool = False,
             **config) -> Pipeline:
    config = {"seed": 3, "shuffle_files": True, **config}
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, decode=decode,
                                     num_threads=2)
    noise = ElementOperator(  # a keyed stage: the same record gets the same draw
        ElementOperatorConfig(stochastic=True),
        fn=lambda e, key: e.update_data({"x": e.data["x"] + jax.random.uniform(key)}),
    )
    return Pipeline(source=source, stages=[noise], batch_size=batch_size, prefetch=prefetch,
                    drop_remainder=drop_remainder, rngs=nnx.Rngs(1))


def values(batch) -> list[float]:
    return np.asarray(batch["x"]).tolist()


def epochs(p: Pipeline, count: int = 2) -> list[list[float]]:
    out = [values(b) for _ in range(count) for b in p]
    p.source.close()
    return out


def _ours(threads) -> set[str]:
    """The pipeline's worker and the source's reader threads among ``threads`` (JAX and
    XLA may start threads of their own on first use)."""
    return {t.name for t in threads if t.is_alive()
            and (t.name == "datarax-dispatch" or "-reader" in t.name)}


def _ahead_of(source, handed_out: int) -> int:
    """Records the reader assembled past what was handed out (waits for the worker)."""
    reader = source.host_reader
    eventually(lambda: reader.cursor > handed_out)  # at once, unless the machine is loaded
    return reader.cursor - handed_out


@pytest.mark.parametrize("prefetch", [1, 3])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_read_ahead_serves_the_batches_read_on_the_consumers_thread(
    tmp_path, prefetch, drop_remainder
) -> None:
    paths = write(tmp_path)
    kw = {"on_error": "skip", "drop_remainder": drop_remainder}
    ahead = epochs(pipeline(paths, prefetch, **kw))
    assert ahead == epochs(pipeline(paths, 0, **kw))
    flat = sorted(int(v) for batch in ahead[: len(ahead) // 2] for v in batch)
    expected = [i for i in range(N) if i not in BAD]
    if drop_remainder:  # the short last batch is dropped, nothing else
        assert len(flat) == len(expected) // 8 * 8 and set(flat) <= set(expected)
    else:
        assert flat == expected


def test_source_state_is_what_was_handed_out_while_batches_are_read_ahead(tmp_path) -> None:
    paths = write(tmp_path)
    p = pipeline(paths, prefetch=3, on_error="skip")
    source = p.source
    it = iter(p)
    head = [values(next(it)) for _ in range(2)]
    assert source.get_state()["current_index"] == 18  # 16 records + bad 13 and 14 passed
    assert source.get_state()["skipped"] == 2
    assert _ahead_of(source, 18) > 0  # the worker did read on
    assert source.get_state()["current_index"] == 18  # ... without moving the position
    assembled = source.host_reader.cursor - 18  # the worker may go on meanwhile: first
    assert source.get_state()["prefetch_cache"] >= assembled > 0
    state = source.get_state()
    rest = [values(b) for b in it]
    source.close()

    fresh = pipeline(paths, prefetch=3, on_error="skip")
    fresh.source.set_state(state)  # the seed's promise: the source's own state resumes
    got = []
    for batch in fresh:  # the state after the last batch counts the epoch's skips
        got.append(values(batch))
        at_end = fresh.source.get_state()
    assert got == rest
    assert (at_end["current_epoch"], at_end["current_index"], at_end["skipped"]) == (0, N, 3)
    after = fresh.source.get_state()  # the pass ended: the next epoch's start, no skips yet
    assert (after["current_epoch"], after["current_index"], after["skipped"]) == (1, 0, 0)
    assert head + rest == epochs(pipeline(paths, 0, on_error="skip"), 1)


def test_restoring_the_source_mid_pass_continues_from_the_restored_position(tmp_path) -> None:
    paths = write(tmp_path)
    reference = epochs(pipeline(paths, on_error="skip"), 1)
    p = pipeline(paths, on_error="skip")
    it = iter(p)
    first = values(next(it))
    state = p.source.get_state()
    served = [values(next(it)) for _ in range(3)]
    p.source.set_state(state)  # back to after the first batch: the next three again
    again = [values(next(it)) for _ in range(3)]
    assert again == served == reference[1:4]
    p.source.set_state(p.source.get_state())  # restoring where it stands loses nothing
    assert [first, *again, *(values(b) for b in it)] == reference
    p.source.close()


def test_a_direct_read_between_batches_is_not_served_again(tmp_path) -> None:
    paths = write(tmp_path)
    reference = [v for batch in epochs(pipeline(paths, 0, on_error="skip"), 1) for v in batch]
    p = pipeline(paths, on_error="skip")
    it = iter(p)
    first = values(next(it))
    _ahead_of(p.source, 8)
    direct = np.asarray(p.source.get_batch(8)["x"]).tolist()  # the source's own records
    rest = [v for b in it for v in values(b)]
    assert len(first) + len(direct) + len(rest) == N - len(BAD)
    assert sorted(int(v) for v in direct) == sorted(int(v) for v in reference[8:16])
    assert first + rest == reference[:8] + reference[16:]
    p.source.close()


def test_a_bad_record_raises_at_its_batch_after_the_batches_before_it(tmp_path) -> None:
    paths = write(tmp_path)
    for prefetch in (0, 3):
        before = set(threading.enumerate())
        p = pipeline(paths, prefetch, shuffle_files=False)
        it = iter(p)
        assert [values(next(it)) for _ in range(1)][0][0] >= 0.0  # records 0..7
        for _ in range(2):  # a retry meets the same record again
            with pytest.raises(RecordError, match=r"record 13 of file '.*part-0.array_record'"):
                next(it)
            assert p.source.get_state()["current_index"] == 8  # the failing batch not handed out
            # the worker and the reader threads are released with the error, not at collection
            assert _ours(set(threading.enumerate()) - before) == set()
        p.source.close()


def test_skips_read_ahead_are_counted_once_when_passed(tmp_path) -> None:
    paths = write(tmp_path)
    p = pipeline(paths, prefetch=3, shuffle_files=False, on_error="skip")
    it = iter(p)
    next(it)  # records 0..7; the worker reads past 13, 14 and maybe 57
    _ahead_of(p.source, 8)
    assert p.source.get_state()["skipped"] == 0 and p.source.skipped_records() == []
    next(it)  # 8..12, 15..17: passes 13 and 14
    assert p.source.get_state()["skipped"] == 2
    assert [r.index for r in p.source.skipped_records()] == [13, 14]
    rest = list(it)
    assert len(rest) == (N - 3 - 16 + 7) // 8
    assert [r.index for r in p.source.skipped_records()] == [13, 14, 57]
    p.source.close()


def test_the_worker_and_reader_threads_end_with_the_pass(tmp_path) -> None:
    paths = write(tmp_path)
    before = set(threading.enumerate())
    p = pipeline(paths, prefetch=2, on_error="skip")
    for _ in p:
        pass
    it = iter(p)
    next(it)
    it.close()
    it = iter(p)
    next(it)
    del it
    p.source.close()
    eventually(lambda: not _ours(set(threading.enumerate()) - before))
    assert _ours(set(threading.enumerate()) - before) == set()


def test_a_source_serving_batches_its_own_way_is_read_through_its_method(tmp_path) -> None:
    paths = write(tmp_path)

    class Doubled(ArrayRecordSourceModule):  # post-processes every batch it serves
        def get_batch_with_indices(self, batch_size):
            batch, indices = super().get_batch_with_indices(batch_size)
            return (None, None) if batch is None else ({"x": batch["x"] * 2}, indices)

    config = ArrayRecordSourceConfig(seed=3, shuffle_files=True, on_error="skip")
    source = Doubled(config, paths, decode=decode, num_threads=2)
    assert source.batch_cursor() is None  # so the pipeline never bypasses the override
    p = Pipeline(source=source, stages=[], batch_size=8, prefetch=2)
    served = sorted(int(v) for b in p for v in np.asarray(b["x"]))
    source.close()
    assert served == [2 * i for i in range(N) if i not in BAD]


def test_check_finite_on_batches_read_ahead_names_the_record(tmp_path) -> None:
    from datarax.core.errors import SpecMismatchError

    paths = write(tmp_path)

    def with_inf(record: bytes) -> dict[str, np.ndarray]:
        value = int(np.frombuffer(record, np.int32)[0])
        return {"x": np.float32(np.inf if value == 21 else value)}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths, decode=with_inf,
                                     num_threads=2)
    p = Pipeline(source=source, stages=[], batch_size=8, prefetch=3, check_finite=True)
    it = iter(p)
    assert [values(next(it)) for _ in range(2)][1] == list(range(8, 16))
    with pytest.raises(SpecMismatchError, match=r"field 'x' of the record at position 21 of "
                       r"epoch 0 \(stable index 21\), record 21 of file '.*part-0"
                       r"\.array_record', holds NaN or inf"):
        next(it)
    assert source.get_state()["current_index"] == 16  # the failing batch not handed out
    source.close()
