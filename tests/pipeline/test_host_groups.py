"""The read-ahead worker takes the batches a host reader has ready in one go (their device
copies made by one call): the same batches, errors and positions as one at a time."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest

from datarax.core.errors import RecordError
from datarax.core.owned import fresh_aligned, owned_device_put_all, seal
from datarax.pipeline import Pipeline, host_pass
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.host_reader import HostReader

from int_record_files import write_int_parts

N = 200


def write(tmp: pathlib.Path) -> list[str]:
    return write_int_parts(tmp, (90, N))


def make_decode(bad: int | None):
    def decode(record: bytes) -> dict[str, np.ndarray]:
        value = int(np.frombuffer(record, np.int32)[0])
        if value == bad:
            raise ValueError(f"record {value} is bad")
        return {"x": np.float32([value, -value]), "y": np.int32(value)}

    return decode


def count_group_sizes(monkeypatch) -> list[int]:
    """The number of values each grouped device copy is given, appended as they are made."""
    sizes: list[int] = []

    def counted(values, device=None):
        sizes.append(len(values))
        return owned_device_put_all(values, device)

    monkeypatch.setattr(host_pass, "owned_device_put_all", counted)
    return sizes


def serve(paths, prefetch: int, bad: int | None = None, stop_after: int | None = None):
    """Every batch (as lists), the error met (its text) and the source's state."""
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=5, shuffle_files=True), paths,
                                     decode=make_decode(bad), num_threads=2)
    pipeline = Pipeline(source=source, stages=[], batch_size=8, prefetch=prefetch)
    served, error = [], None
    try:
        for batch in pipeline:
            assert all(isinstance(v, jax.Array) for v in batch.values())
            served.append({k: np.asarray(v).tolist() for k, v in batch.items()})
            if stop_after is not None and len(served) == stop_after:
                break
    except RecordError as err:
        error = str(err)
    state = source.get_state()
    state.pop("prefetch_cache", None)  # informative: how far the reader had read
    source.close()
    return served, error, state


def test_batches_are_the_same_taken_in_groups_or_one_by_one(tmp_path, monkeypatch) -> None:
    paths = write(tmp_path)
    sizes = count_group_sizes(monkeypatch)
    grouped = serve(paths, prefetch=2)
    assert max(sizes) > 2  # several batches' fields in one call
    assert grouped == serve(paths, prefetch=0)  # on the consumer's thread, one by one
    assert sorted(int(y) for b in grouped[0] for y in b["y"]) == list(range(N))
    assert serve(paths, prefetch=2, stop_after=11) == serve(paths, prefetch=0, stop_after=11)


def test_a_bad_record_in_a_group_raises_after_the_batches_before_it(tmp_path) -> None:
    paths = write(tmp_path)
    served, _, _ = serve(paths, prefetch=0)
    at = 13  # the bad record is in the 14th batch: inside a group of ready batches
    bad = served[at]["y"][3]
    grouped = serve(paths, prefetch=2, bad=bad)
    assert grouped == serve(paths, prefetch=0, bad=bad)
    batches, error, state = grouped
    assert batches == served[:at]
    assert f"record {bad - 90 if bad >= 90 else bad} of file" in error
    assert f"record {bad} is bad" in error
    assert state["current_index"] == 8 * at


def test_ready_says_whether_a_peek_would_wait_for_a_read() -> None:
    data = [np.int32(i).tobytes() for i in range(40)]
    reader = HostReader(data, lambda b: {"x": np.frombuffer(b, np.int32)[0]}, num_threads=1,
                        chunk_size=16)
    assert not reader.ready(4)  # no session
    reader.start(EpochOrder(length=40, seed=None, epoch=0))
    assert reader.peek_batch(4).columns["x"].tolist() == [0, 1, 2, 3]  # waits for 16 records
    assert reader.ready(4) and reader.ready(12) and not reader.ready(41)  # past the epoch
    for _ in range(3):
        reader.peek_batch(4)
    assert reader.peek_batch(4).columns["x"].tolist() == [16, 17, 18, 19]  # the next chunk
    assert reader.ready(12)
    reader.stop()
    assert not reader.ready(1)
    reader.close()


def test_owned_device_put_all_puts_each_value_as_owned_device_put_does() -> None:
    own = fresh_aligned((4, 3), np.float32)
    own[...] = np.arange(12).reshape(4, 3)
    seal(own)
    caller = np.arange(6, dtype=np.int32)
    values = [own, caller, [1.5, 2.5], jax.numpy.ones(2), own[1:3]]
    out = owned_device_put_all(values)
    caller[:] = -1  # the caller's buffer is theirs: the device array holds the values put
    assert all(isinstance(v, jax.Array) for v in out)
    assert np.asarray(out[0]).tolist() == np.arange(12).reshape(4, 3).tolist()
    assert np.asarray(out[1]).tolist() == list(range(6))
    assert np.asarray(out[2]).tolist() == [1.5, 2.5]
    assert np.asarray(out[3]).tolist() == [1.0, 1.0]
    assert np.asarray(out[4]).tolist() == [[3, 4, 5], [6, 7, 8]]
    assert owned_device_put_all([]) == []


@pytest.mark.parametrize("limit", [1, 3])
def test_a_group_is_at_most_the_batches_its_bytes_allow(tmp_path, monkeypatch, limit) -> None:
    paths = write(tmp_path)
    sizes = count_group_sizes(monkeypatch)
    # a record is 12 bytes (float32 x2 + int32), a batch 96: ``limit`` batches' bytes
    monkeypatch.setattr(host_pass, "AHEAD_GROUP_BYTES", 96 * limit)
    assert serve(paths, prefetch=2)[0] == serve(paths, prefetch=0)[0]
    assert max(sizes) == 2 * limit  # two fields a batch


def test_a_passs_first_batch_is_handed_over_alone(tmp_path, monkeypatch) -> None:
    paths = write(tmp_path)
    sizes = count_group_sizes(monkeypatch)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=5, shuffle_files=True), paths,
                                     decode=make_decode(None), num_threads=2)
    pipeline = Pipeline(source=source, stages=[], batch_size=8, prefetch=2)
    firsts = []
    for _ in range(3):  # epochs 1 and 2 start with their first chunks read ahead (ready)
        firsts.append(len(sizes))
        assert sum(1 for _ in pipeline) == -(-N // 8)
    source.close()
    assert [sizes[i] for i in firsts] == [2, 2, 2]  # one batch's two fields: the loop waits
    assert max(sizes) > 2  # the batches after it still go in groups
