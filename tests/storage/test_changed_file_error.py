"""A remote file changed or deleted after the source was built: the error a source raises
is the store's ``RemoteObjectError`` (as docs/object-storage.md's Faults table says), naming
the record and the URL, so ``except RemoteObjectError`` catches it and ``RecordError``
handlers still do."""

from __future__ import annotations

import pathlib

import fsspec
import numpy as np
import pytest

from datarax.errors import RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.storage import RemoteObjectError, ShardCache
from tests.int_record_files import write_records

URL = "memory://changed-file-error/a.array_record"


@pytest.fixture
def remote_file(tmp_path: pathlib.Path):
    """A plain ArrayRecord file of 40 records over 1 MiB (counted from its footer, not
    downloaded when the source is built) in memory://; yields its bytes."""
    rng = np.random.default_rng(0)
    local = write_records(tmp_path / "a.array_record",
                          [np.int32(i).tobytes() + rng.bytes(30_000) for i in range(40)])
    data = pathlib.Path(local).read_bytes()
    memory = fsspec.filesystem("memory")
    memory.pipe(URL.removeprefix("memory:/"), data)
    yield data
    if memory.exists(URL.removeprefix("memory:/")):
        memory.rm(URL.removeprefix("memory:/"))


def _source(tmp_path: pathlib.Path, **config) -> ArrayRecordSourceModule:
    return ArrayRecordSourceModule(
        ArrayRecordSourceConfig(**config), URL, cache=ShardCache(tmp_path / "cache", "10M"),
        decode=lambda raw: {"i": np.frombuffer(raw[:4], np.int32)[0]})


@pytest.mark.parametrize("through", ["source", "pipeline"])
def test_a_file_rewritten_after_the_build_raises_remote_object_error(
        tmp_path: pathlib.Path, remote_file: bytes, through: str) -> None:
    source = _source(tmp_path)
    changed = remote_file[:100] + bytes([remote_file[100] ^ 1]) + remote_file[101:]
    fsspec.filesystem("memory").pipe(URL.removeprefix("memory:/"), changed)  # same size
    with pytest.raises(RemoteObjectError) as caught:
        if through == "source":
            source.get_batch(8)
        else:
            next(iter(Pipeline(source=source, stages=[], batch_size=8)))
    source.close()
    assert isinstance(caught.value, RecordError)
    assert (caught.value.url, caught.value.path, caught.value.index) == (URL, URL, 0)
    assert str(caught.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 0 of file '{URL}': '{URL}' changed in "
        "the store since it was listed")


def test_a_deleted_file_is_remote_object_error(
        tmp_path: pathlib.Path, remote_file: bytes) -> None:
    source = _source(tmp_path)
    fsspec.filesystem("memory").rm(URL.removeprefix("memory:/"))
    with pytest.raises(RemoteObjectError, match=f"record 0 of file '{URL}': '{URL}' was "
                                                "deleted from the store after") as caught:
        source.get_batch(8)
    source.close()
    assert caught.value.url == URL
