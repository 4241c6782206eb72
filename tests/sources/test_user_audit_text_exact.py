"""Text fields come out exactly as written: trailing NUL characters, empty strings and
non-ASCII text survive every read path of a random-access source (a dataset folder, a
``decode`` returning ``str``, a user's own ``RandomAccessSource``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.pipeline import Pipeline
from datarax.sources import RandomAccessSource

TEXTS = ["a\x00", "tail\x00\x00", "", "\x00lead", "héllo 日本語 😀", "x"]


def served(source, batch_size: int = 4) -> list:
    try:
        return [t for b in Pipeline(source=source, stages=[], batch_size=batch_size) for t in b["t"]]
    finally:
        source.close()


def test_dataset_folder_keeps_trailing_nuls(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    write_dataset([{"t": t, "i": i} for i, t in enumerate(TEXTS)], str(tmp_path / "ds"), shards=2)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"))
    assert list(source.get_batch(len(TEXTS))["t"]) == TEXTS
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"))
    assert served(source) == TEXTS


def test_decode_returning_str_keeps_trailing_nuls(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import write_records

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    path = write_records(tmp_path / "text.array_record", (t.encode() for t in TEXTS))

    def decode(record: bytes) -> dict:
        text = record.decode()
        return {"t": text, "pair": np.asarray([text, text[::-1]], dtype=object)}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, decode=decode)
    assert served(source) == TEXTS
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, decode=decode)
    pairs = [list(p) for b in Pipeline(source=source, stages=[], batch_size=4) for p in b["pair"]]
    source.close()
    assert pairs == [[t, t[::-1]] for t in TEXTS]


@dataclass(frozen=True)
class _Config(StructuralConfig):
    shuffle: bool = False
    seed: int = 0


class _Texts(RandomAccessSource):
    def __len__(self) -> int:
        return len(TEXTS)

    def read_records(self, indices):
        return [{"t": TEXTS[i], "i": np.int32(i)} for i in indices]


def test_own_random_access_source_keeps_trailing_nuls():
    assert served(_Texts(_Config(), num_threads=1), batch_size=3) == TEXTS


def test_a_concatenation_of_memory_and_files_keeps_trailing_nuls(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from datarax.dataset import write_dataset
    from datarax.sources import (
        ArrayRecordSourceConfig,
        ArrayRecordSourceModule,
        ConcatSource,
        MemorySource,
        MemorySourceConfig,
    )

    write_dataset([{"i": np.int32(i), "t": f"r{i}\x00"} for i in range(3, 6)], str(tmp_path / "ds"))
    memory = MemorySource(MemorySourceConfig(),
                          {"i": np.arange(3, dtype=np.int32), "t": [f"r{i}\x00" for i in range(3)]})
    files = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"))
    batches = list(Pipeline(source=ConcatSource([memory, files]), stages=[], batch_size=4))
    files.close()
    served = [(int(i), t) for b in batches for i, t in zip(np.asarray(b["i"]), b["t"])]
    assert served == [(i, f"r{i}\x00") for i in range(6)]  # a batch across both parts was "r0"
