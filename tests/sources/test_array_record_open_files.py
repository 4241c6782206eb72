"""A source over many shards keeps a bounded number of them open.

Before, every shard read stayed open until ``close()``: a shuffled pass over 2,000
shards held 2,000 file descriptors after a few hundred batches and, under the common
``ulimit -n 1024``, failed with ``Too many open files`` (reported as a bad record:
"Fix or regenerate the file"). Now at most ``max_open`` readers stay open (a quarter
of the process's open-file limit by default), the least recently used closed first, and
the records read are the same.
"""

from __future__ import annotations

import errno

import jax
import numpy as np
import pytest

pytest.importorskip("array_record.python.array_record_module")

from int_record_files import int_source, write_int_parts  # noqa: E402

from datarax.sources import array_record_files  # noqa: E402
from datarax.sources.array_record_files import ArrayRecordFiles  # noqa: E402
from datarax.sources.open_readers import (  # noqa: E402
    MOST_OPEN,
    OpenReaders,
    TooManyOpenFiles,
    default_limit,
)
from datarax.sources.skip_ledger import bad_record_error  # noqa: E402

ENDS = [5, 10, 15, 20, 25, 30]  # six files of five records: 0-4, 5-9, ...


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return write_int_parts(tmp_path_factory.mktemp("shards"), ENDS)


def test_records_read_across_more_files_than_may_be_open_are_the_files_records(paths):
    files = ArrayRecordFiles(paths, [5] * 6, max_open=2)
    keys = np.random.default_rng(0).permutation(30).tolist()
    try:
        for start in range(0, 30, 7):  # batches touching up to six files each
            chunk = keys[start:start + 7]
            assert [int(np.frombuffer(r, np.int32)[0]) for r in files.__getitems__(chunk)] \
                == chunk
            assert files.open_files <= 2
    finally:
        files.close()
    assert files.open_files == 0


def test_a_reader_in_use_is_not_closed_and_the_least_recently_used_idle_one_is():
    opened, closed = [], []
    readers = OpenReaders(lambda key: opened.append(key) or f"reader {key}",
                          close=closed.append, limit=2)

    def nested(reader):  # while 'a' is read, 'b' then 'c' open: 'b' closes, not 'a'
        assert readers.read("b", str) == "reader b"
        assert readers.read("c", str) == "reader c"
        return reader

    assert readers.read("a", nested) == "reader a"
    assert (opened, closed, readers.open_count) == (["a", "b", "c"], ["reader b"], 2)
    readers.read("a", str)  # still open: not opened again
    assert opened == ["a", "b", "c"]
    readers.close()
    assert sorted(closed) == ["reader a", "reader b", "reader c"] and readers.open_count == 0


def test_a_shuffled_source_with_two_files_open_serves_the_unbounded_ones_order(
        paths, monkeypatch):
    def epoch(source):
        values, most_open = [], 0
        with source:
            for record in source:
                values.append(int(record["x"]))
                most_open = max(most_open, source._data.open_files)
        return values, most_open

    unbounded, _ = epoch(int_source(paths, shuffle_files=True, seed=3, num_epochs=1))
    monkeypatch.setattr(array_record_files, "default_limit", lambda: 2)
    bounded, most_open = epoch(int_source(paths, shuffle_files=True, seed=3, num_epochs=1,
                                          num_threads=2))
    assert bounded == unbounded and sorted(bounded) == list(range(30))
    # open: the limit, or more only while more files are being read at once (two reader
    # threads and the consumer's own first read at most), never one per file
    assert most_open <= 3


def test_the_default_limit_is_a_quarter_of_the_open_file_limit():
    resource = pytest.importorskip("resource")
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    expected = MOST_OPEN if soft == resource.RLIM_INFINITY else max(16, min(MOST_OPEN, soft // 4))
    assert default_limit() == expected


def test_too_many_open_files_is_not_blamed_on_the_file():
    cause = OSError(errno.EMFILE, "cannot open the file: open() failed: Too many open files")
    message = str(bad_record_error("ArrayRecordSourceModule", ("a.array_record", 3), cause,
                                   skipping=False))
    assert "The file is fine" in message and "ulimit -n" in message
    assert "regenerate" not in message


class _NoFileLeftReader:
    """array_record's reader where the process is out of file descriptors: not ok, and
    its close names the cause."""

    def __init__(self, path, *args, **kwargs):
        self.path = path

    def ok(self):
        return False

    def close(self):
        raise OSError(f"open() failed: Too many open files; opening {self.path}")


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_running_out_of_file_descriptors_stops_the_read_and_skips_nothing(
        paths, monkeypatch, on_error):
    from datarax.sources import array_record_counts

    with monkeypatch.context() as at_build:  # counting the records
        at_build.setattr(array_record_counts, "array_record_reader", lambda: _NoFileLeftReader)
        with pytest.raises(TooManyOpenFiles, match=r"The file is fine: .*ulimit -n: "):
            int_source(paths, on_error=on_error, num_epochs=1)
    source = int_source(paths, on_error=on_error, num_epochs=1)
    monkeypatch.setattr(array_record_files, "array_record_reader", lambda: _NoFileLeftReader)
    with source, pytest.raises(TooManyOpenFiles, match=r"cannot open '.*part-0.array_record'"
                               r".* The file is fine: .*ulimit -n: ") as err:
        next(iter(source))
    assert err.value.errno == errno.EMFILE
    assert source.skipped_records() == []


def test_the_sources_attributes_hold_no_value_per_file(paths):
    # Flax walks every leaf of a module's attributes when it is built (and checks them):
    # a tuple of file names and one of record ends cost ~110 ms at 2,000 shards
    def leaves(files):
        source = int_source(files, shuffle_files=True)
        with source:
            return len(jax.tree.leaves(list(vars(source).values()))), source.paths

    two, two_paths = leaves(paths[:2])
    six, six_paths = leaves(paths)
    assert two == six
    assert (two_paths, six_paths) == (paths[:2], paths)



def test_too_many_open_files_survives_a_pickle_from_a_decode_worker():
    import pickle

    from datarax.sources.open_readers import TooManyOpenFiles

    error = TooManyOpenFiles("/data/part-3.array_record", "[Errno 24] Too many open files")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TooManyOpenFiles and copy.errno == error.errno == 24
    assert str(copy) == str(error)
    assert copy.path == "/data/part-3.array_record"
    assert str(copy).startswith("[Errno 24] cannot open '/data/part-3.array_record': [Errno 24] "
                                "Too many open files. The file is fine")
