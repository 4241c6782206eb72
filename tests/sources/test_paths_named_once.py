"""A file named twice in a file source's ``paths`` (listed twice, or a glob pattern plus a
path it matches too) is refused when the source is built, naming the file, the entries
that name it and what to do: each epoch would otherwise read it twice."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from int_record_files import write_int_parts

from datarax.errors import ConfigError
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources.npy import NpySource, NpySourceConfig
from datarax.storage import ShardCache
from datarax.text import JsonlDocuments

_WHAT_TO_DO = "List each file once; to read a file more often than the others, mix sources with MixSource weights."


def _array_record(paths, **kwargs):
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths, **kwargs)


def test_array_record_file_listed_twice_is_refused(tmp_path) -> None:
    a, b = write_int_parts(tmp_path, [3, 5])
    with pytest.raises(ConfigError) as err:
        _array_record([a, b, a])
    assert str(err.value) == (
        f"ArrayRecordSourceModule: paths names the file '{a}' twice (listed twice), so each "
        f"epoch would read it twice. {_WHAT_TO_DO}")


def test_array_record_glob_and_a_path_it_matches_is_refused(tmp_path, monkeypatch) -> None:
    a, b = write_int_parts(tmp_path, [3, 5])
    pattern = str(tmp_path / "part-*.array_record")
    # the same file by another spelling (./ and a relative path) is the same file
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        _array_record([pattern, "./part-1.array_record"])
    message = str(err.value)
    assert f"the file './part-1.array_record' twice (by the glob pattern '{pattern}' and again by './part-1.array_record')" in message
    assert message.endswith(_WHAT_TO_DO)
    with pytest.raises(ConfigError, match="and again by the glob pattern"):
        _array_record([b, pattern])


def test_array_record_each_file_once_reads_each_record_once(tmp_path) -> None:
    write_int_parts(tmp_path, [3, 5])
    source = _array_record([str(tmp_path / "part-0.*"), str(tmp_path / "part-1.*")])
    assert len(source) == 5
    source.close()


def test_npy_field_naming_a_file_twice_is_refused(tmp_path) -> None:
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.arange(3, dtype=np.int32))
    pattern, a = str(tmp_path / "*.npy"), str(tmp_path / "a.npy")
    with pytest.raises(ConfigError) as err:
        NpySource(NpySourceConfig(paths={"x": [pattern, a]}))
    assert str(err.value) == (
        f"NpySource: field 'x': paths names the file '{a}' twice (by the glob pattern "
        f"'{pattern}' and again by '{a}'), so each epoch would read it twice. {_WHAT_TO_DO}")
    # one file in two fields is two columns, not a repeat
    source = NpySource(NpySourceConfig(paths={"x": a, "y": a}))
    assert len(source) == 3
    source.close()


def test_remote_glob_and_a_url_it_matches_is_refused(tmp_path) -> None:
    memory = fsspec.filesystem("memory")
    for name in ("a", "b"):
        memory.pipe(f"/named-once/{name}.npy", b"")
    pattern, url = "memory://named-once/*.npy", "memory://named-once/b.npy"
    cache = ShardCache(str(tmp_path / "cache"), max_bytes="1M")
    with pytest.raises(ConfigError) as err:
        NpySource(NpySourceConfig(paths=[pattern, url]), cache=cache)
    message = str(err.value)
    assert "named-once/b.npy' twice (by the glob pattern 'memory://named-once/*.npy' and again by 'memory://named-once/b.npy')" in message
    assert message.endswith(_WHAT_TO_DO)
    with pytest.raises(ConfigError, match="listed twice"):
        _array_record([url, url], cache=cache)


def test_text_documents_naming_a_file_twice_are_refused(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "a"}\n')
    with pytest.raises(ConfigError) as err:
        JsonlDocuments([str(tmp_path / "*.jsonl"), str(path)])
    assert str(err.value).startswith(f"JsonlDocuments: paths names the file '{path}' twice")
    assert str(err.value).endswith(  # documents are mixed by MixedDocuments, not MixSource
        "to read a file more often than the others, mix corpora with MixedDocuments weights.")


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_data_files_naming_a_file_twice_are_refused(tmp_path, streaming) -> None:
    pytest.importorskip("datasets")
    from datarax.sources import from_hf

    path = tmp_path / "a.jsonl"
    path.write_text('{"x": 1}\n{"x": 2}\n')
    pattern = str(tmp_path / "*.jsonl")
    with pytest.raises(ConfigError) as err:
        from_hf("json", data_files=[pattern, str(path)], split="train", streaming=streaming)
    assert f"data_files names the file '{path}' twice (by the glob pattern '{pattern}' and again by '{path}')" in str(err.value)
    assert str(err.value).endswith(_WHAT_TO_DO)
