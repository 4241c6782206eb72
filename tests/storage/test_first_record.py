"""A remote source learns its records' structure from record 0 read in the first batch's
own requests: ``seek`` asks the store nothing, the first batch and record 0 are one read,
and a record 0 that cannot be decoded is named at the first batch. Counted, not timed."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("array_record")
pytest.importorskip("zstandard")
fsspec = pytest.importorskip("fsspec")

from int_record_files import numbered_in_memory  # noqa: E402

FILES, PER_FILE, BATCH = 6, 40, 16


@pytest.fixture(scope="module")
def local_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """6 files of 40 records (a 4-byte number, then 3 KB of random bytes), also in
    ``memory://first-record``."""
    folder = tmp_path_factory.mktemp("first-record")
    with numbered_in_memory(folder, "/first-record", FILES, PER_FILE) as paths:
        yield paths


def decode(record: bytes) -> dict[str, Any]:
    return {"i": np.frombuffer(record[:4], np.int32)[0]}


def refuse_0(record: bytes) -> dict[str, Any]:
    if np.frombuffer(record[:4], np.int32)[0] == 0:
        raise ValueError("record 0 is not an image")
    return decode(record)


@pytest.fixture
def ranged(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, int, int]]]:
    """Any first batch by range; each ``Fetcher.read_ranges`` call's requests, in order."""
    from datarax.storage import array_record_ranges, head_start
    from datarax.storage.fetch import Fetcher

    monkeypatch.setattr(head_start, "REQUEST_BYTES", 0)
    monkeypatch.setattr(head_start, "BUDGET_SHARE", 4)
    monkeypatch.setattr(array_record_ranges, "COUNT_MIN_SIZE", 0)  # footers read at build, to count
    calls: list[list[tuple[str, int, int]]] = []
    read_ranges = Fetcher.read_ranges

    def noted(self: Any, wanted: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append([(o.name, s, e) for o, s, e in wanted])
        return read_ranges(self, wanted, *args, **kwargs)

    monkeypatch.setattr(Fetcher, "read_ranges", noted)
    return calls


def remote(cache: pathlib.Path, decode: Any = decode) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=5),
                                   "memory://first-record/*.array_record", decode=decode,
                                   cache=ShardCache(cache, max_bytes="64M"))


def test_seek_asks_nothing_and_record_0_comes_in_the_first_batchs_read(
        local_files: list[str], tmp_path: pathlib.Path,
        ranged: list[list[tuple[str, int, int]]]) -> None:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage.array_record_ranges import ArrayRecordRanges

    config = ArrayRecordSourceConfig(shuffle_files=True, seed=5)
    with ArrayRecordSourceModule(config, local_files, decode=decode) as local:
        expected = np.asarray(local.get_batch(BATCH)["i"]).tolist()
    assert 0 not in expected
    files = [ArrayRecordRanges.from_url(p) for p in local_files]

    def chunk(i: int) -> tuple[str, int, int]:  # record i's request
        (start, end, _), = files[i // PER_FILE].ranges(files[i // PER_FILE].chunks_of(
            [i % PER_FILE]))
        return f"part-{i // PER_FILE}.array_record", start, end

    with remote(tmp_path) as src:
        built = len(ranged)  # the footers, to count the records
        requests = src.stats()["storage"]["ranged_requests"]
        src.seek(0)
        assert len(ranged) == built and src.stats()["storage"]["ranged_requests"] == requests
        assert np.asarray(src.get_batch(BATCH)["i"]).tolist() == expected
        first = next(call for call in ranged[built:] if call)  # (footers known: none asked)
        assert sorted(first) == sorted(chunk(i) for i in [0, *expected])  # one read
        asked = len(ranged)
        assert src.element_spec()["i"].shape == ()
        assert len(ranged) == asked  # learned already: nothing asked for it
        rest = []
        while (batch := src.get_batch(4 * BATCH)) is not None:
            rest += np.asarray(batch["i"]).tolist()
        assert sorted(expected + rest) == list(range(FILES * PER_FILE))  # each once, 0 too


def test_a_record_0_that_cannot_be_decoded_is_named_at_the_first_batch(
        local_files: list[str], tmp_path: pathlib.Path,
        ranged: list[list[tuple[str, int, int]]]) -> None:
    from datarax.core.errors import RecordError

    with remote(tmp_path, decode=refuse_0) as src:
        src.seek(0)  # asks nothing: no error yet
        with pytest.raises(RecordError) as info:
            src.get_batch(BATCH)
    message = str(info.value)
    assert (info.value.path, info.value.index) == (
        "memory:///first-record/part-0.array_record", 0)
    assert ("cannot read record 0 of file 'memory:///first-record/part-0.array_record': "
            "ValueError: record 0 is not an image") in message
    assert "Fix or regenerate the file (or the decode, if it is what raised)" in message
    assert "on_error='skip'" in message
