"""``ranged_reads=True`` reads about a request a record, so a reader thread's chunk is
capped at ``RANGED_CHUNK`` positions: with the default 16 batches (4,096 records of 256)
the batch after the first waited for 4,096 requests, and a ``break`` out of the loop for
every thread's chunk (probes110: 15,500 requests before a loop of 4 batches ended, 4,090
with the cap)."""

from __future__ import annotations

import pathlib

import numpy as np

from datarax.dataset import write_dataset
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources.array_record_remote import RANGED_CHUNK
from datarax.storage import ShardCache


def test_ranged_reads_read_chunks_of_at_most_ranged_chunk_records(tmp_path: pathlib.Path) -> None:
    import fsspec

    folder = tmp_path / "ds"
    write_dataset([{"i": np.int32(i)} for i in range(2000)], str(folder), shards=2)
    memory = fsspec.filesystem("memory")
    for path in folder.iterdir():
        memory.pipe(f"/ranged-chunks/{path.name}", path.read_bytes())
    config = ArrayRecordSourceConfig(shuffle_files=True, seed=3)
    try:
        with ArrayRecordSourceModule(config, str(folder)) as local, ArrayRecordSourceModule(
                config, "memory://ranged-chunks", ranged_reads=True,
                cache=ShardCache(tmp_path / "cache")) as remote:
            for _ in range(3):
                assert remote.get_batch(256)["i"].tolist() == local.get_batch(256)["i"].tolist()
            assert local.host_reader.chunk_size == 16 * 256  # files read whole: 16 batches
            assert remote.host_reader.chunk_size == RANGED_CHUNK == 2 * 256
            assert remote.stats()["storage"]["fetched"] == 0  # no file downloaded
    finally:
        memory.rm("/ranged-chunks", recursive=True)
