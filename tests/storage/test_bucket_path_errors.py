"""A bad bucket path is refused like a bad local one: the message starts with the source's
name and says what to write instead (a folder: a glob pattern of its files)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import numpy as np
import pytest

from datarax.core.errors import ConfigError, RecordError

pytest.importorskip("array_record")
fsspec = pytest.importorskip("fsspec")

from int_record_files import write_int_parts  # noqa: E402

BUCKET = "/bucket-path-errors"


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two files of ``int32`` records in ``memory://bucket-path-errors/ds``."""
    folder = tmp_path_factory.mktemp("bucket-path-errors")
    memory = fsspec.filesystem("memory")
    for path in write_int_parts(folder, [3, 5]):
        memory.pipe(f"{BUCKET}/ds/{pathlib.Path(path).name}", pathlib.Path(path).read_bytes())
    try:
        yield "memory://bucket-path-errors/ds"
    finally:
        memory.rm(BUCKET, recursive=True)


def build(paths: object, tmp_path: pathlib.Path) -> object:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    return ArrayRecordSourceModule(
        ArrayRecordSourceConfig(), paths=paths, cache=ShardCache(tmp_path, max_bytes="8M"),
        decode=lambda r: {"x": np.frombuffer(r, np.int32)[0]})


@pytest.mark.parametrize("tail", ["", "/"])
def test_a_bucket_folder_is_refused_with_a_glob_of_its_files(
        bucket: str, tmp_path: pathlib.Path, tail: str) -> None:
    with pytest.raises(RecordError) as info:
        build(bucket + tail, tmp_path)
    assert str(info.value) == (
        f"ArrayRecordSourceModule: 'memory://bucket-path-errors/ds{tail}' is a folder, not a "
        "file; name its files, or a glob pattern such as "
        "'memory://bucket-path-errors/ds/*'. A folder is read whole only when given alone "
        "and holding a datarax dataset's datarax_dataset.json.")


@pytest.mark.parametrize("name,error,start", [
    ("nope-*.array_record", RecordError, "ArrayRecordSourceModule: the glob pattern "),
    ("nope.array_record", RecordError,
     "ArrayRecordSourceModule: 'memory://bucket-path-errors/ds/nope.array_record' does not "
     "exist; check the bucket and the key (a glob pattern such as "
     "'memory://bucket-path-errors/ds/data-*.array_record' is expanded)."),
    (["part-0.array_record", "part-0.array_record"], ConfigError,
     "ArrayRecordSourceModule: paths names the file "),
])
def test_a_bad_bucket_path_is_refused_naming_the_source(
        bucket: str, tmp_path: pathlib.Path, name: object, error: type, start: str) -> None:
    paths = [f"{bucket}/{n}" for n in name] if isinstance(name, list) else f"{bucket}/{name}"
    with pytest.raises(error) as info:
        build(paths, tmp_path)
    assert str(info.value).startswith(start)


def test_a_dataset_folder_in_a_list_is_refused_saying_to_give_it_alone(
        bucket: str, tmp_path: pathlib.Path) -> None:
    memory = fsspec.filesystem("memory")
    memory.pipe(f"{BUCKET}/ds/datarax_dataset.json", b"{}")
    try:
        with pytest.raises(RecordError, match="read whole only when given alone"):
            build([bucket, bucket + "/part-0.array_record"], tmp_path)
    finally:
        memory.rm(f"{BUCKET}/ds/datarax_dataset.json")


def test_the_glob_of_the_folder_reads_every_record(bucket: str, tmp_path: pathlib.Path) -> None:
    source = build(bucket + "/*", tmp_path)
    assert np.asarray(source.get_batch(5)["x"]).tolist() == [0, 1, 2, 3, 4]


def test_a_missing_bucket_s_example_glob_is_inside_that_bucket() -> None:
    from datarax.storage.urls import list_objects

    with pytest.raises(RecordError) as info:
        list_objects("memory://bucket-path-errors-none", where="MySource")
    assert str(info.value) == (
        "MySource: 'memory://bucket-path-errors-none' does not exist; check the bucket and "
        "the key (a glob pattern such as 'memory://bucket-path-errors-none/data-*' is "
        "expanded).")
