"""What a source is given as its shard cache: a ShardCache, or None for the default
folder; anything else is refused naming the source and what to pass. The default folder
follows XDG_CACHE_HOME only when it is an absolute path. storage_options must be a dict;
a URL that pathlib.Path cut to one slash ('s3:/bucket') is refused, not read as a local path.
list_objects is given URLs only, with the readers' wording of a local or mixed list."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

from number_sources import memory_npy  # noqa: E402

from datarax.errors import ConfigError  # noqa: E402
from datarax.sources import NpySource, NpySourceConfig  # noqa: E402
from datarax.storage import default_cache_dir, list_objects  # noqa: E402

URL = "memory://cache-arguments/x.npy"


@pytest.fixture(autouse=True)
def _npy_file() -> None:
    memory_npy("cache-arguments")


def test_a_folder_path_as_cache_is_refused_saying_how_to_make_one(tmp_path) -> None:
    with pytest.raises(ConfigError, match=(
            r"^NpySource: cache must be a datarax.storage.ShardCache\(directory, max_bytes\) "
            r"or None .*, got str '.*'; for the folder: cache=ShardCache\('.*', max_bytes=...\)")):
        NpySource(NpySourceConfig(paths=URL), cache=str(tmp_path))


def test_cache_false_is_refused_pointing_at_ranged_reads(tmp_path) -> None:
    pytest.importorskip("array_record")
    from int_record_files import write_records

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    path = write_records(tmp_path / "r.array_record", (b"abcd" for _ in range(4)))
    with open(path, "rb") as f:
        fsspec.filesystem("memory").pipe("/cache-arguments/r.ar", f.read())
    with pytest.raises(ConfigError, match=r"^ArrayRecordSourceModule: cache must be .*got bool "
                                          r"False; .*ranged_reads=True"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), "memory://cache-arguments/*.ar",
                                cache=False)


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("DATARAX_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    assert default_cache_dir() == os.path.join(str(tmp_path), ".cache", "datarax")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == os.path.join(str(tmp_path / "xdg"), "datarax")


def test_storage_options_that_are_not_a_dict_are_refused_naming_the_url() -> None:
    with pytest.raises(ConfigError, match=(
            r"^storage_options must be a dict of the filesystem's options \(e.g. \{'anon': "
            r"True\}, passed to fsspec for 'memory://cache-arguments/x.npy'\), got list "
            r"\[\('anon', True\)\]\.$")):
        NpySource(NpySourceConfig(paths=URL), storage_options=[("anon", True)])


@pytest.mark.parametrize("paths", [Path("memory://cache-arguments/x.npy"),
                                   ["memory:/cache-arguments/x.npy"]])
def test_a_url_cut_by_pathlib_is_refused_saying_to_pass_a_str(paths) -> None:
    with pytest.raises(ConfigError, match=(
            r"^the path 'memory:/cache-arguments/x.npy' reads as a URL with one '/' after "
            r"'memory:' \(pathlib.Path turns 'memory://' into 'memory:/'\); pass the URL as a "
            r"str, e.g. 'memory://cache-arguments/x.npy'\.$")):
        NpySource(NpySourceConfig(paths=paths))
    assert NpySource(NpySourceConfig(paths=URL)).get_batch(4)["data"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("paths, message", [
    ([URL, "/data/a.npy"], r"^paths mixes local paths and URLs \(\['memory://cache-arguments/x.npy', "
                           r"'/data/a.npy'\]\); give one kind"),
    ("/data/a.npy", r"^paths names local paths only \(\['/data/a.npy'\]\); list_objects lists URLs"),
    ([], r"^paths is an empty list; name at least one file\.$"),
    ([URL, 3], r"^paths must be a path, a glob pattern or a list of them .*got int 3\.$"),
])
def test_list_objects_is_given_urls_only(paths, message) -> None:
    with pytest.raises(ConfigError, match=message):
        list_objects(paths)
