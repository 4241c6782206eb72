"""Record counts of ArrayRecord files, local or remote, checked against a dataset's metadata.

Each file is opened once to count its records (several in parallel); a file that is
not a readable ArrayRecord file raises a :class:`~datarax.core.errors.RecordError`
naming it.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable
from typing import Any

from datarax.core.errors import RecordError
from datarax.dataset.metadata import DatasetInfo
from datarax.host.counts import count_words
from datarax.sources.array_record_files import array_record_reader
from datarax.sources.open_readers import TooManyOpenFiles
from datarax.storage import RemoteShards
from datarax.storage.array_record_ranges import ranged_count

__all__ = ["check_counts", "count_records", "remote_counts"]


def _count_one(path: str) -> int:
    ArrayRecordReader = array_record_reader()  # noqa: N806

    try:
        reader = ArrayRecordReader(path)
    except Exception as err:  # noqa: BLE001 - reported with the file name
        raise _not_array_record(path, f"{type(err).__name__}: {err}") from err
    if not reader.ok():
        try:
            reader.close()
            cause = "the reader could not open it"
        except Exception as err:  # noqa: BLE001
            cause = str(err) or "the reader could not open it"
        if "Too many open files" in cause:  # the process's limit, not the file
            raise TooManyOpenFiles(path, cause)
        raise _not_array_record(path, cause)
    count = int(reader.num_records())
    reader.close()
    return count


def _not_array_record(path: str, cause: str) -> RecordError:
    return RecordError(
        f"ArrayRecordSourceModule: '{path}' is not a readable ArrayRecord file ({cause}); "
        "it may be truncated (an interrupted write), empty or in another format. Rewrite "
        "it with array_record's ArrayRecordWriter or remove it from paths.",
        path=path,
    )


def check_counts(files: list[str], counts: list[int], info: DatasetInfo) -> None:
    expected = {shard.file: shard.records for shard in info.shards}
    for path, count in zip(files, counts):
        if expected[os.path.basename(path)] != count:
            raise RecordError(
                f"ArrayRecordSourceModule: the shard '{path}' holds "
                f"{count_words(count, 'record')}, its "
                f"dataset's metadata says {expected[os.path.basename(path)]}; the folder mixes "
                "files of different conversions. Convert the data again.",
                path=path,
            )


def remote_counts(remote: RemoteShards) -> list[int]:
    """Record count of each remote file: from the dataset's metadata, else from its footer
    read by range (:func:`~datarax.storage.array_record_ranges.ranged_count`), else counted in the
    cached copy (small files are fetched once for it; a restart finds them cached)."""
    missing = [i for i, o in enumerate(remote.objects) if o.records is None]

    def count_held(i: int) -> int:
        with remote.hold(i) as path:  # kept while counted, whatever other threads need
            return _count_one(path)

    def count(i: int) -> int:
        ranged = ranged_count(remote, i)
        if ranged is not None:
            return ranged
        try:
            return remote.reading(i, lambda: count_held(i))  # a damaged copy: fetched again
        except RecordError as err:
            url = remote.objects[i].url
            if err.path is None or err.path == url:
                raise
            raise RecordError(str(err).replace(err.path, url), path=url) from err
        finally:
            remote.release_unused()

    counted = dict(zip(missing, _parallel(count, missing)))
    return [o.records if o.records is not None else counted[i] for i, o in enumerate(remote.objects)]


def _parallel(fn: Callable[[Any], int], items: list[Any]) -> list[int]:
    if len(items) <= 1:
        return [fn(i) for i in items]
    with concurrent.futures.ThreadPoolExecutor(min(16, len(items))) as pool:
        return list(pool.map(fn, items))


def count_records(files: list[str]) -> list[int]:
    """Record count of each file, opened in parallel; bad files raise RecordError."""
    if len(files) == 1:
        return [_count_one(files[0])]
    with concurrent.futures.ThreadPoolExecutor(min(16, len(files))) as pool:
        return list(pool.map(_count_one, files))
