"""A shard closed for room and opened again is the file the source counted, or refused.

With at most ``max_open`` files open, a shard is closed when another must open and
opened again when read again. Before, the reopen read whatever was at the path then: a
shard replaced in between (another record count, other bytes) served other records with
no error. Now a reopen checks the record count counted at build and the file's inode,
size and modification time as first opened, and refuses a changed file by name.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("array_record.python.array_record_module")

from int_record_files import int32, int_source, write_int_parts, write_records  # noqa: E402

from datarax.core.errors import RecordError  # noqa: E402
from datarax.sources import array_record_files  # noqa: E402
from datarax.sources.array_record_files import ArrayRecordFiles  # noqa: E402
from datarax.sources.open_readers import FileChangedError  # noqa: E402

ENDS = [5, 10, 15, 20]  # four files of five records: 0-4, 5-9, 10-14, 15-19


def _values(records):
    return [int(np.frombuffer(r, np.int32)[0]) for r in records]


def _replace(path, ids):
    """``path`` replaced (``os.replace``) by a file of ``int32(i)`` for ``i`` in ``ids``."""
    write_records(path + ".new", map(int32, ids))
    os.replace(path + ".new", path)


def _read_each_file_then_first_again(files):
    """Files 0, 1, 2 read in turn (file 0 closed for room at file 2), then file 0 again."""
    first = [_values(files.__getitems__([f * 5, f * 5 + 4])) for f in range(3)]
    return first, _values(files.__getitems__([0, 1, 2]))


def test_an_unchanged_file_reopened_serves_the_records_read_with_every_file_open(tmp_path):
    paths = write_int_parts(tmp_path, ENDS)
    bounded, unbounded = ArrayRecordFiles(paths, [5] * 4, max_open=2), ArrayRecordFiles(
        paths, [5] * 4)
    try:
        assert _read_each_file_then_first_again(bounded) \
            == _read_each_file_then_first_again(unbounded) \
            == ([[0, 4], [5, 9], [10, 14]], [0, 1, 2])
        keys = np.random.default_rng(0).permutation(20).tolist()
        assert _values(bounded.__getitems__(keys)) == _values(unbounded.__getitems__(keys)) \
            == keys
    finally:
        bounded.close()
        unbounded.close()


@pytest.mark.parametrize(("ids", "detail"), [
    (range(100, 107), "it holds 7 records now, 5 when the source counted them"),
    (range(100, 105), "another file now: it was replaced (same size and modification time)"),
])
def test_a_file_replaced_between_its_close_and_reopen_is_refused(tmp_path, ids, detail):
    paths = write_int_parts(tmp_path, ENDS)
    files = ArrayRecordFiles(paths, [5] * 4, max_open=2)
    try:
        first = [_values(files.__getitems__([f * 5])) for f in range(3)]  # 0 closed at 2
        assert (first, files.open_files) == ([[0], [5], [10]], 2)
        stat = os.stat(paths[0])
        _replace(paths[0], ids)
        os.utime(paths[0], ns=(stat.st_atime_ns, stat.st_mtime_ns))  # time alone tells nothing
        for _ in range(2):  # refused again, not read
            with pytest.raises(FileChangedError) as err:
                files.__getitems__([1])
            assert str(err.value) == (
                f"'{paths[0]}' changed on disk since the source first opened it ({detail}); "
                "it was rewritten or replaced while being read, and none of its records were "
                "read from the changed file. Let the writes finish, then rebuild the source "
                "(it counts the files again), or read with on_error='skip' to skip this "
                "file's records.")
            assert isinstance(err.value, RecordError) and err.value.path == paths[0]
        assert _values(files.__getitems__([6, 19])) == [6, 19]  # the other files still read
    finally:
        files.close()
    rebuilt = ArrayRecordFiles(paths, [len(ids), 5, 5, 5], max_open=2)  # counted again
    try:
        assert _values(rebuilt.__getitems__([0, len(ids)])) == [100, 5]
    finally:
        rebuilt.close()


def test_a_file_rewritten_in_place_is_refused(tmp_path):
    paths = write_int_parts(tmp_path, ENDS)
    files = ArrayRecordFiles(paths, [5] * 4, max_open=2)
    try:
        for f in (3, 2, 1):  # 3 closed at 1
            files.__getitems__([f * 5])
        stat = os.stat(paths[3])
        write_records(paths[3], map(int32, range(100, 105)))  # same count, other values
        assert os.stat(paths[3]).st_ino == stat.st_ino
        os.utime(paths[3], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a clock tick on
        with pytest.raises(FileChangedError, match=r"\(modified at \d{4}-\d\d-\d\d [\d:.]+\+00:00 "
                           r"now, \d{4}-\d\d-\d\d [\d:.]+\+00:00 when first opened\)"):
            files.__getitems__([15])
    finally:
        files.close()


def _first_file_replaced_when_first_closed(paths, monkeypatch):
    """Sources built after this keep 2 files open; file 0 is replaced (7 records) as soon
    as it is first closed for room."""
    closed = []

    def close_then_replace_the_first(reader):
        reader.close()
        closed.append(reader)
        if len(closed) == 1:
            _replace(paths[0], range(100, 107))

    monkeypatch.setattr(array_record_files, "default_limit", lambda: 2)
    monkeypatch.setattr(array_record_files, "_close_reader", close_then_replace_the_first)


def test_a_source_reading_a_changed_file_stops_naming_it(tmp_path, monkeypatch):
    paths = write_int_parts(tmp_path, ENDS)
    _first_file_replaced_when_first_closed(paths, monkeypatch)
    values = []
    source = int_source(paths, num_epochs=2, num_threads=1)
    with source, pytest.raises(FileChangedError) as err:
        values.extend(int(record["x"]) for record in source)
    assert values == list(range(20))  # epoch 0 read file 0 before it was closed
    assert str(err.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 0 of file '{paths[0]}' (epoch 1): "
        f"'{paths[0]}' changed on disk since the source first opened it (it holds 7 records "
        "now, 5 when the source counted them);")
    assert (err.value.path, err.value.index) == (paths[0], 0)


def test_a_changed_file_is_skipped_under_on_error_skip_counted_and_reported(
        tmp_path, monkeypatch):
    paths = write_int_parts(tmp_path, ENDS)
    _first_file_replaced_when_first_closed(paths, monkeypatch)
    source = int_source(paths, on_error="skip", num_epochs=2, num_threads=1)
    with source:
        values = [int(record["x"]) for record in source]
        skipped = source.skipped_records()
    # epoch 0 reads file 0 before closing it; epoch 1 refuses it and skips its records
    assert values == list(range(20)) + list(range(5, 20))
    assert [(r.epoch, r.index, r.path) for r in skipped] == [(1, i, paths[0]) for i in range(5)]
    assert all("changed on disk since the source first opened it (it holds 7 records now"
               in r.cause for r in skipped)
