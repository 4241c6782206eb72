"""Block windows' reader threads read chunks of at most a window's records (when the
cache holds two windows or more), so the threads in flight read neighbouring windows:
``benchmarks/block_window_refetch.py`` measures the downloads (3 windows, batch 256:
1.06-1.18x the files an epoch before, 0.95-1.0x now)."""

from __future__ import annotations

import threading
import types

import numpy as np

from datarax.sources.array_record_remote import window_chunk
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.host_reader import HostReader


class Table:
    """int32 records; the positions of each batched read are noted."""

    def __init__(self, n: int) -> None:
        self.n, self.reads, self.lock = n, [], threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> bytes:
        return np.int32(i).tobytes()

    def __getitems__(self, keys: list[int]) -> list[bytes]:
        with self.lock:
            self.reads.append(len(keys))
        return [self[k] for k in keys]


def epoch(max_chunk: int | None, batch: int = 64) -> tuple[list[int], list[int]]:
    table = Table(3000)
    with HostReader(table, lambda r: {"x": np.frombuffer(r, np.int32)[0]}, num_threads=4,
                    max_chunk=max_chunk) as reader:
        reader.start(EpochOrder(3000, 7, 0))
        served = []
        while (b := reader.next_batch(batch)) is not None:
            served += b.indices.tolist()
    return served, table.reads


def test_a_capped_chunk_is_whole_batches_and_the_epoch_the_same():
    served, reads = epoch(None)
    assert max(reads) == 1024  # 16 batches of 64 by default
    capped, capped_reads = epoch(150)
    assert capped == served and sorted(capped) == list(range(3000))
    assert max(capped_reads) == 128  # two whole batches: 150 rounded down
    assert max(epoch(40)[1]) == 64  # under a batch: one batch


def test_the_cap_is_an_average_window_from_a_cache_of_two_windows():
    blocks = types.SimpleNamespace(ends=np.cumsum([84, 84, 80, 84, 84, 84]))

    def remote(max_bytes: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(objects=[types.SimpleNamespace(size=256 << 10)] * 6,
                                     cache=types.SimpleNamespace(max_bytes=max_bytes))

    window = 4 * (256 << 10)
    assert window_chunk(remote(2 * window), blocks, 4) == 4 * 500 // 6  # 500 records
    assert window_chunk(remote(2 * window - 1), blocks, 4) is None  # under two windows
    assert window_chunk(None, blocks, 4) is None  # local files
    assert window_chunk(remote(2 * window), None, 4) is None  # windows of whole files
