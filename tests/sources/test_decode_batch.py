"""``decode_batch``: ArrayRecord records of a fixed layout decoded a chunk at a time —
the same values, order and resume as ``decode``, and bad records still named."""

from __future__ import annotations

import collections
import pathlib

import numpy as np
import pytest
from int_record_files import write_records

from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


def write(path: pathlib.Path, n: int, width: int = 6, start: int = 0) -> str:
    return write_records(path, (np.full(width, i, np.float32).tobytes()
                                for i in range(start, start + n)))


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"data": np.frombuffer(record, np.float32)}


def decode_batch(records: list[bytes]) -> dict[str, np.ndarray]:
    return {"data": np.frombuffer(b"".join(records), np.float32).reshape(len(records), -1)}


def make(paths, **kw) -> ArrayRecordSourceModule:
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=4, shuffle_files=True), paths,
                                   num_threads=2, **kw)


def epochs(source, count: int = 2, batch_size: int = 7) -> list[list[int]]:
    pipeline = Pipeline(source=source, batch_size=batch_size)
    return [[int(v) for b in pipeline for v in np.asarray(b["data"])[:, 0]] for _ in range(count)]


@pytest.fixture
def files(tmp_path) -> list[str]:
    return [write(tmp_path / "a.array_record", 40), write(tmp_path / "b.array_record", 33, start=40)]


def test_decode_batch_serves_what_decode_serves(files):
    sizes, decoded = [], collections.Counter()

    def counted(records: list[bytes]) -> dict[str, np.ndarray]:
        sizes.append(len(records))
        out = decode_batch(records)
        decoded.update(out["data"][:, 0].astype(int).tolist())
        return out

    by_record = epochs(make(files, decode=decode))
    source = make(files, decode=decode, decode_batch=counted)
    by_chunk = epochs(source)
    source.close()  # (the third epoch's start, read ahead, finished or dropped)
    assert by_chunk == by_record
    # whole chunks, every record once an epoch (and at most once more: read ahead)
    assert max(sizes) > 1 and len(decoded) == 73 and set(decoded.values()) <= {2, 3}
    assert sorted(by_chunk[0]) == list(range(73)) and by_chunk[0] != by_chunk[1]


def test_decode_batch_alone_learns_the_structure_from_one_record(files):
    source = make(files, decode_batch=decode_batch)
    spec = source.element_spec()
    assert spec["data"].shape == (6,) and spec["data"].dtype == np.float32
    assert epochs(source, 1) == epochs(make(files, decode=decode), 1)


def test_resume_mid_epoch_with_decode_batch(files):
    source = make(files, decode_batch=decode_batch)
    pipeline = Pipeline(source=source, batch_size=5)
    it = iter(pipeline)
    head = [int(v) for _ in range(3) for v in np.asarray(next(it)["data"])[:, 0]]
    state = source.get_state()
    assert state["current_index"] == 15
    rest = [int(v) for b in it for v in np.asarray(b["data"])[:, 0]]
    fresh = make(files, decode_batch=decode_batch)
    fresh.set_state(state)
    again = [int(v) for b in Pipeline(source=fresh, batch_size=5) for v in np.asarray(b["data"])[:, 0]]
    assert again == rest and sorted(head + rest) == list(range(73))


def test_a_record_of_another_layout_is_named_as_with_decode(tmp_path):
    first = write(tmp_path / "a.array_record", 4, width=6)
    second = write(tmp_path / "b.array_record", 4, width=3, start=4)
    source = make([first, second], decode=decode, decode_batch=decode_batch)
    with pytest.raises(RecordError) as info:
        epochs(source, 1, batch_size=8)
    assert "field 'data' decodes to float32(3,), the first record's is float32(6,)" in str(info.value)
    assert info.value.path == second


def test_bad_records_skipped_and_reported_with_decode_batch(tmp_path):
    path = write(tmp_path / "a.array_record", 20)

    def fussy(record: bytes) -> dict[str, np.ndarray]:
        value = np.frombuffer(record, np.float32)
        if value[0] == 13:
            raise ValueError("record 13 is bad")
        return {"data": value}

    def fussy_batch(records: list[bytes]) -> dict[str, np.ndarray]:
        return {"data": np.stack([fussy(r)["data"] for r in records])}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip"), path,
                                     decode=fussy, decode_batch=fussy_batch, num_threads=2)
    served = epochs(source, 1, batch_size=6)[0]
    assert served == [i for i in range(20) if i != 13]
    (skipped,) = source.skipped_records()
    assert skipped.index == 13 and "record 13 is bad" in skipped.cause


def test_columns_of_another_dtype_fall_back_to_decode(files):
    def as_float64(records: list[bytes]) -> dict[str, np.ndarray]:
        return {"data": decode_batch(records)["data"].astype(np.float64)}

    source = make(files, decode=decode, decode_batch=as_float64)
    assert epochs(source, 1) == epochs(make(files, decode=decode), 1)
    assert source.element_spec()["data"].dtype == np.float32


def test_decode_batch_must_be_callable(files):
    with pytest.raises(ConfigError, match=r"decode_batch must be callable \(list of raw records"):
        make(files, decode=decode, decode_batch="frombuffer")


@pytest.mark.parametrize("bad, said", [
    (lambda records: [np.zeros(6, np.float32)], "decode_batch returned list, expected a dict of arrays"),
    (lambda records: {"data": np.float32(1)}, "decode_batch returned field 'data' as a scalar for 1 record"),
    (lambda records: {"data": np.zeros((2 * len(records), 6), np.float32)},
     "decode_batch returned field 'data' as 2 rows for 1 record"),
])
def test_decode_batch_alone_that_does_not_return_a_row_per_record_is_named(files, bad, said):
    """Without decode, decode_batch of one record learns the structure: a list (not the
    reader's AttributeError) or a column that is not one row per record (not the first
    row silently taken) is a bad record said so."""
    source = make(files, decode_batch=bad)
    with pytest.raises(RecordError) as info:
        epochs(source, 1)
    assert said in str(info.value) and "one row per record" in str(info.value)
    assert info.value.path == files[0] or info.value.path == files[1]
