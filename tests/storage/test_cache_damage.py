"""A cached copy damaged on the local disk (bit flips, an edit) after it was downloaded:
never served, never blamed on the file in the store."""

from __future__ import annotations

import os

import fsspec
import numpy as np
import pytest

from datarax.storage import ShardCache

MEM = fsspec.filesystem("memory")


def _remote_dataset(tmp_path, prefix: str, sha: bool = True) -> str:
    """A datarax dataset (its metadata gives each shard's SHA-256), or plain ArrayRecord
    files (nothing but their size and version tag to check)."""
    pytest.importorskip("array_record")
    local = tmp_path / "local"
    if sha:
        from datarax.dataset.writer import write_dataset

        write_dataset([{"x": np.int32([i, -i])} for i in range(40)], local, shards=4)
    else:
        from int_record_files import write_parts

        local.mkdir()
        write_parts(local, [range(10 * f, 10 * f + 10) for f in range(4)],
                    lambda i: np.int32([i, -i]).tobytes(), name="data-{:05d}-of-00004.array_record")
    MEM.put(str(local), f"/{prefix}/ds", recursive=True)
    return f"memory://{prefix}/ds" if sha else f"memory://{prefix}/ds/data-*.array_record"


def _damage(cache_dir, name: str) -> None:
    """Flip bytes inside the cached copy of ``name``, keeping its size."""
    (path,) = [p for p in (cache_dir / "shards").iterdir() if p.name.endswith(name)]
    data = bytearray(path.read_bytes())
    for k in range(64, len(data) - 64, 5):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("sha", [True, False], ids=["dataset", "plain-files"])
def test_a_damaged_cached_shard_is_fetched_again_and_the_values_are_right(tmp_path, sha):
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    url = _remote_dataset(tmp_path, f"damaged-{sha}", sha)
    decode = None if sha else (lambda record: {"x": np.frombuffer(record, np.int32)})
    config = ArrayRecordSourceConfig(num_epochs=1)

    def read():
        kwargs = {} if decode is None else {"decode": decode}
        src = ArrayRecordSourceModule(config, url, cache=ShardCache(tmp_path / "cache"), **kwargs)
        try:
            return [np.asarray(r["x"]).tolist() for r in src], src.stats()["storage"]
        finally:
            src.close()

    first, stats = read()
    assert first == [[i, -i] for i in range(40)] and stats["fetched"] == 4
    _damage(tmp_path / "cache", "data-00002-of-00004.array_record")
    again, stats = read()  # the copy in the store is fine: the same values, one file fetched again
    assert again == first
    assert stats["fetched"] == 1 and stats["cache_hits"] >= 3


def test_a_shard_replaced_without_its_metadata_says_to_write_the_whole_folder(tmp_path):
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    url = _remote_dataset(tmp_path, "replaced")
    other = MEM.cat("/replaced/ds/data-00003-of-00004.array_record")
    MEM.pipe("/replaced/ds/data-00000-of-00004.array_record", other)  # the metadata says otherwise
    src = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), url,
                                  cache=ShardCache(tmp_path / "cache"))
    with pytest.raises(Exception, match=r"'memory:///?replaced/ds/data-00000-of-00004.array_record' "
                                        r"changed in the store: its SHA-256 is [0-9a-f]{64}, the "
                                        r"dataset's metadata \(datarax_dataset.json\) says "
                                        r"[0-9a-f]{64}.*shard replaced without rewriting the "
                                        r"metadata.*Write the whole dataset folder again"):
        list(src)
    src.close()
