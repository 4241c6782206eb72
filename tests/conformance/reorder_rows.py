"""Conformance rows of the sources that reorder other sources' records: InterleaveSource
and ShuffleBufferSource, each over children of every kind (in memory, a user's host
table, ArrayRecord files, a forward-only stream, a Hugging Face stream, a mixture).

Registered in rows.ROWS like any row; each row's records are numbered ``0 .. n-1``.
The builders import rows.py's helpers when called (rows.py imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from datarax.pipeline import Pipeline
from datarax.sources import InterleaveSource, MemorySource, MemorySourceConfig, ShuffleBufferSource
from datarax.testing import SourceRow


def id_vec_memory(lo: int, hi: int, seed: int) -> MemorySource:
    """Records ``lo .. hi - 1`` as {id, vec} in memory, shuffled from ``seed``."""
    x = np.arange(lo, hi, dtype=np.int32)
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"id": x, "vec": np.stack([x, -x], 1).astype(np.float32)})


def _mixture(root: Path, with_host: bool) -> Any:
    """rows.py's mixture: memory 0-5, [a host table 6-9,] a stream 10-13."""
    from rows import OffsetStream, ShuffledStreamConfig, TableConfig, make_host_table_source

    from datarax.mixing import MixSource

    sources: dict[str, Any] = {"memory": id_vec_memory(0, 6, seed=7)}
    if with_host:
        sources["host"] = make_host_table_source(TableConfig(num_records=4), root / "mix_host.npy")
    sources["stream"] = OffsetStream(ShuffledStreamConfig(num_records=4, seed=2))
    weights = {name: 6 if name == "memory" else 4 for name in sources}
    return MixSource(sources, weights=weights, seed=1, records_per_epoch=sum(weights.values()))


def _array_record(root: Path) -> Any:
    from reliability_arrayrecord import Decode

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=11, shuffle_files=True),
                                   str(root / "ar" / "data-*.array_record"), decode=Decode(),
                                   num_threads=2)


def _hf_stream(root: Path) -> Any:
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    return HFStreamingSource(HFStreamingConfig(name=str(root / "hf"), split="train", shuffle=True,
                                               seed=3, chunk_size=4, shuffle_buffer_size=5))


def _row(name: str, build: Callable[[Path], Any], n: int, ids: Callable[[Any], Any] | None = None
         ) -> Callable[[Path], SourceRow]:
    def make_row(root: Path) -> SourceRow:
        from rows import pipeline_over

        def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
            return pipeline_over(build(root), shard_index, shard_count, stages)

        return SourceRow(name, make, n, ids or (lambda b: b["id"]), shuffled=True, kind="STREAM")

    return make_row


def _interleave(root: Path) -> Any:
    """Memory 0-5, a host table 6-9 and a stream 10-13, two open at once, blocks of 3."""
    from rows import OffsetStream, ShuffledStreamConfig, TableConfig, make_host_table_source

    host = make_host_table_source(TableConfig(num_records=4), root / "mix_host.npy")
    stream = OffsetStream(ShuffledStreamConfig(num_records=4, seed=2))
    return InterleaveSource([id_vec_memory(0, 6, seed=7), host, stream], cycle_length=2, block_length=3)


def _interleave_mixture(root: Path) -> Any:
    """A mixture (memory 0-5, stream 10-13) beside a host table 6-9, blocks of 2."""
    from rows import TableConfig, make_host_table_source

    host = make_host_table_source(TableConfig(num_records=4), root / "mix_host.npy")
    return InterleaveSource([_mixture(root, with_host=False), host], cycle_length=2, block_length=2)


def _interleave_array_record(root: Path) -> Any:
    """ArrayRecord files 0-12 beside memory 13-17, blocks of 4."""
    return InterleaveSource([_array_record(root), id_vec_memory(13, 18, seed=4)], cycle_length=2,
                            block_length=4)


def _interleave_hf_streaming(root: Path) -> Any:
    """A Hugging Face stream (idx 0-9, text) beside memory idx 10-13 with text, blocks of 3."""
    idx = np.arange(10, 14, dtype=np.int32)
    memory = MemorySource(MemorySourceConfig(shuffle=True, seed=2), {
        "idx": idx, "x": idx.astype(np.float32) * 0.5,
        "sentence": np.asarray([f"sentence {i}" for i in idx]),
    })
    return InterleaveSource([_hf_stream(root), memory], cycle_length=2, block_length=3)


def _text_ids(batch: Any) -> Any:
    """``idx``, checked against the text each record carries."""
    assert [int(t.split()[1]) for t in batch["sentence"]] == np.asarray(batch["idx"]).tolist()
    return batch["idx"]


def _shuffle_stream(root: Path) -> Any:
    from rows import ShuffledStream, ShuffledStreamConfig

    return ShuffleBufferSource(ShuffledStream(ShuffledStreamConfig()), buffer_size=4, seed=1)


# name -> (builder, module the row needs or None): rows.ROWS takes them in
REORDER_ROWS: dict[str, tuple[Callable[[Path], SourceRow], str | None]] = {
    "interleave": (_row("interleave", _interleave, 14), None),
    "interleave_mixture": (_row("interleave_mixture", _interleave_mixture, 14), None),
    "interleave_array_record": (_row("interleave_array_record", _interleave_array_record, 18),
                                "array_record.python.array_record_module"),
    "interleave_hf_streaming": (_row("interleave_hf_streaming", _interleave_hf_streaming, 14,
                                     _text_ids), "datasets"),
    "shuffle_buffer": (_row("shuffle_buffer", _shuffle_stream, 10), None),
    "shuffle_buffer_mixture": (_row("shuffle_buffer_mixture", lambda root: ShuffleBufferSource(
        _mixture(root, with_host=True), buffer_size=5, seed=2), 14), None),
    "shuffle_buffer_array_record": (_row("shuffle_buffer_array_record", lambda root:
                                         ShuffleBufferSource(_array_record(root), buffer_size=4,
                                                             seed=3), 13),
                                    "array_record.python.array_record_module"),
    "shuffle_buffer_hf_streaming": (_row("shuffle_buffer_hf_streaming", lambda root:
                                         ShuffleBufferSource(_hf_stream(root), buffer_size=3,
                                                             seed=4), 10, _text_ids), "datasets"),
}
