"""``datarax.text``'s file readers (``JsonlDocuments``, ``ParquetDocuments``) read from a
real S3 server (moto, through the proxy of ``conftest.py``): a URL or glob pattern where
the local path goes.

Each reader: the same documents and packed rows as over the local files; a restore
from a mid-pass state continues exactly (also across a restart of the reader); a
second pass makes no request; settings and messages name the URLs, never the cache;
a missing object's error names its URL.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from datarax.core.errors import ConfigError, RecordError

if TYPE_CHECKING:
    from tests.storage.conftest import S3

pytest.importorskip("pyarrow")


def cache(tmp_path: pathlib.Path) -> Any:
    from datarax.storage import ShardCache

    return ShardCache(tmp_path / "cache", max_bytes="16M")


def texts(count: int) -> list[str]:
    """Document ``i`` is the words ``1000*i + j``, of varied lengths."""
    lengths = np.random.default_rng(3).integers(1, 30, size=count)
    return [" ".join(str(1000 * i + j) for j in range(n)) for i, n in enumerate(lengths)]


def word_ids(text: str) -> list[int]:
    return [int(w) for w in text.split()]


def drain(source: Any, batch_size: int = 2) -> list[list[list[int]]]:
    out = []
    while (batch := source.get_batch(batch_size)) is not None:
        out.append(np.asarray(batch["tokens"]).tolist())
    return out


def gets(s3: S3, names: list[str]) -> int:
    return sum(s3.proxy.count("GET", n) + s3.proxy.count("HEAD", n) for n in names)


def write(folder: pathlib.Path, kind: str, docs: list[str]) -> list[str]:
    """``docs`` in two files ``part-0``, ``part-1`` of ``kind``; their names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = []
    for k, part in enumerate((docs[:25], docs[25:])):
        name = f"part-{k}.{kind}"
        if kind == "parquet":
            pq.write_table(pa.table({"text": part}), folder / name, row_group_size=7)
        else:
            (folder / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
        names.append(name)
    return names


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_text_from_s3_packs_and_resumes_like_the_local_files(
        s3: S3, tmp_path: pathlib.Path, kind: str) -> None:
    from datarax.text import JsonlDocuments, PackedTextConfig, PackedTextSource, ParquetDocuments

    docs = texts(45)
    folder = tmp_path / kind
    folder.mkdir()
    names = write(folder, kind, docs)
    s3.upload_folder(folder, kind)
    reader_class = JsonlDocuments if kind == "jsonl" else ParquetDocuments
    urls = [s3.url(f"{kind}/{n}") for n in names]

    def make(remote: bool) -> Any:
        if remote:  # a glob pattern: listed, sorted
            return reader_class(s3.url(f"{kind}/part-*.{kind}"), cache=cache(tmp_path))
        return reader_class([folder / n for n in names])

    config = PackedTextConfig(seq_len=16, open_rows=2, tokenize_block=4)
    local = make(False)
    remote = make(True)
    assert remote.paths == urls
    assert list(remote.read(0, 0)) == list(local.read(0, 0)) == docs
    assert list(remote.read(0, 31)) == docs[31:]
    assert remote.num_documents() == len(docs)
    assert remote.describe(0, 30) == f"{urls[1]} {'line 6' if kind == 'jsonl' else 'row 5'}"

    reference = drain(PackedTextSource(config, local, word_ids))
    source = PackedTextSource(config, remote, word_ids)
    assert drain(source) == reference
    requests = gets(s3, names)
    assert remote.storage_stats()["fetched"] == len(names)
    source.seek(1, 0)
    assert drain(source) == reference  # a second pass: no listing, no download
    assert gets(s3, names) == requests

    source.seek(0, 0)
    for _ in range(5):
        source.get_batch(2)
    state = source.get_state()
    assert state["settings"]["documents.files"] == names  # file names, not cache paths
    assert str(tmp_path / "cache") not in json.dumps(state, default=str)
    again = make(True)  # a restart: listed again, read from the cache
    resumed = PackedTextSource(config, again, word_ids)
    resumed.set_state(state)
    assert drain(resumed) == reference[5:]
    assert again.storage_stats()["fetched"] == 0
    assert again.storage_stats()["cache_hits"] == len(names)
    from_local = PackedTextSource(config, make(False), word_ids)
    from_local.set_state(state)  # the same file names: a local copy restores it too
    assert drain(from_local) == reference[5:]

    remote.close()
    again.close()
    assert again.storage_stats()["held"] == 0
    assert list(again.read(0, 44)) == docs[44:]  # held again from the cache


def test_a_bad_line_of_a_remote_file_is_named_by_its_url(s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.text import JsonlDocuments, PackedTextConfig, PackedTextSource

    s3.put("t/bad.jsonl", b'{"text": "1 2"}\n{"text": 3}\n')
    url = s3.url("t/bad.jsonl")
    source = PackedTextSource(PackedTextConfig(seq_len=4),
                              JsonlDocuments(url, cache=cache(tmp_path)), word_ids)
    with pytest.raises(RecordError, match=f"{url} line 2 field 'text' holds int"):
        drain(source)


@pytest.mark.parametrize("reader", ["JsonlDocuments", "ParquetDocuments"])
def test_a_missing_text_object_is_named(s3: S3, tmp_path: pathlib.Path, reader: str) -> None:
    import datarax.text

    make: Callable[..., Any] = getattr(datarax.text, reader)
    url = s3.url("t/absent.parquet")
    with pytest.raises(RecordError, match=f"'{url}' does not exist"):
        make(url, cache=cache(tmp_path))
    with pytest.raises(RecordError, match="matches no files"):
        make(s3.url("t/absent-*.jsonl"), cache=cache(tmp_path))
    with pytest.raises(ConfigError, match=f"{reader}: paths mixes local paths and URLs"):
        make([str(tmp_path / "a.jsonl"), url])


def test_a_remote_file_that_is_not_parquet_is_named(s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.text import ParquetDocuments

    s3.put("t/c.parquet", b"not parquet")
    url = s3.url("t/c.parquet")
    with pytest.raises(RecordError, match=f"ParquetDocuments: {url} is not a readable Parquet"):
        ParquetDocuments(url, cache=cache(tmp_path))
