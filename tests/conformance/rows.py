"""The rows of the conformance table: every kind of source over a small dataset.

Each row's records are numbered ``0 .. n-1`` and carry their number, so a check can
tell which records a batch holds. A new source joins the table with one entry in
:data:`ROWS` (a builder taking the data folder and returning a ``SourceRow``). What a
pipeline does to an epoch's records (a filter stage, take / skip / repeat) has its own
rows in pipeline_rows.py, run by test_pipeline_table.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_int
from datarax.core.data_source import DataSourceModule
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import SourceRow

from reorder_rows import REORDER_ROWS, id_vec_memory

BATCH = 4
N_MEMORY = 11
N_CSV = 10
N_AR = 13
N_TFDS = 11
N_HF = 10
N_STREAM = 10
N_HOST = 12
N_NPY = 14
N_FILTER_HOST = 16  # pipeline_rows.py


def add_noise(element: Any, key: Any) -> Any:
    """A per-record draw of two uniforms in field 'noise'."""
    return element.update_data({"noise": jax.random.uniform(key, (2,))})


def noise_stages() -> list[Any]:
    """One stochastic stage (a per-record draw in field 'noise'): a resume must also
    continue the randomness exactly. The function is one module-level object, so the
    fresh pipelines a check builds find the step their row compiled before (as a user's
    restarted pipeline does) instead of tracing it again each time."""
    return [ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise)]


def pipeline_over(source: Any, shard_index: int, shard_count: int, stages: Any) -> Pipeline:
    return Pipeline(
        source=source,
        stages=list(stages),
        batch_size=BATCH,
        rngs=nnx.Rngs(0),
        shard_index=shard_index,
        shard_count=shard_count,
    )


def _memory_text(root: Path) -> SourceRow:
    """A MemorySource with a text column and a nested field: text stays on the host and
    is gathered by the same record indices as the compiled columns."""

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        x = np.arange(N_MEMORY, dtype=np.int32)
        data = {
            "x": x,
            "text": np.asarray([f"record {i}" for i in range(N_MEMORY)]),
            "meta": {"double": 2 * x},
        }
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=7), data)
        return pipeline_over(source, shard_index, shard_count, stages)

    def ids(batch: Any) -> Any:
        from_text = np.asarray([int(t.split()[1]) for t in batch["text"]])
        assert from_text.tolist() == np.asarray(batch["x"]).tolist()  # text follows its record
        assert (np.asarray(batch["meta"]["double"]) == 2 * np.asarray(batch["x"])).all()
        return batch["x"]

    return SourceRow("memory_text", make, N_MEMORY, ids, shuffled=True, kind="INDEXED")


# ------------------------------------------------------------------- data files
def write_table_data(root: Path) -> None:
    """Every file-backed row's data under ``root`` (csv/, ar/, tfds/, hf/)."""
    from reliability_sources import write_csv

    write_csv(root / "rows.csv", N_CSV)
    np.save(root / "host.npy", np.arange(N_HOST, dtype=np.int32))
    np.save(root / "mix_host.npy", np.arange(6, 10, dtype=np.int32))  # the mixture's host part
    write_npy_shards(root / "npy")
    np.save(root / "filter_host.npy", np.arange(N_FILTER_HOST, dtype=np.int32))
    try:
        from reliability_arrayrecord import write_files

        write_files(root / "ar", N_AR, num_files=2)
    except ImportError:
        pass
    try:
        _write_tfds(root / "tfds")
    except ImportError:
        pass
    try:
        _write_hf(root / "hf")
    except ImportError:
        pass


def write_npy_shards(root: Path) -> None:
    """``N_NPY`` records in three uneven shards: id (int64, narrowed to int32 when
    read), vec (2,) float32 in a separate field file."""
    root.mkdir(parents=True, exist_ok=True)
    ids = np.arange(N_NPY, dtype=np.int64)
    for k, (lo, hi) in enumerate(((0, 5), (5, 6), (6, N_NPY))):
        np.save(root / f"id-{k}.npy", ids[lo:hi])
    np.save(root / "vec.npy", np.stack([ids, -ids], 1).astype(np.float32))


def _write_tfds(root: Path) -> None:
    """conformance_tiny: ``N_TFDS`` train records: id (int32), vec (2,) float32."""
    import tensorflow_datasets as tfds

    from tfds_datasets import builder

    features = {"id": tfds.features.Tensor(shape=(), dtype=np.int32),
                "vec": tfds.features.Tensor(shape=(2,), dtype=np.float32)}
    examples = {i: {"id": np.int32(i), "vec": np.asarray([i, -i], np.float32)}
                for i in range(N_TFDS)}
    cls = builder("ConformanceTiny", features, {"train": examples})
    cls(data_dir=str(root), file_format="array_record").download_and_prepare()


def _write_hf(root: Path) -> None:
    import pyarrow  # noqa: F401 - the row is left out without it

    from hf_files import write_hub_split

    write_hub_split(root, {
        "idx": np.arange(N_HF, dtype=np.int32),
        "x": np.arange(N_HF, dtype=np.float32) * 0.5,
        "sentence": [f"sentence {i}" for i in range(N_HF)],
    }, rows_per_file=6)


# ------------------------------------------------------------------ user sources
@dataclass(frozen=True)
class ShuffledStreamConfig(StructuralConfig):
    """``num_records`` records per pass, in an order drawn from ``seed + epoch``."""

    num_records: int = N_STREAM
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_records", minimum=1)
        check_int(self, "seed", minimum=0)


class ShuffledStream(DataSourceModule):
    """A forward-only stream written to seed 002's contract: ``get_batch`` and
    ``element_spec`` only, plus ``restart(epoch)`` (the design's way to begin a pass).

    It cannot seek: each pass is a generator drawn from ``seed + epoch``.
    """

    def __init__(self, config: ShuffledStreamConfig, *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__(config, rngs=rngs)
        self.pending = iter(self._pass(0))

    def _pass(self, epoch: int) -> Any:
        order = np.random.default_rng(self.config.seed + epoch).permutation(self.config.num_records)
        for i in order:
            yield int(i)

    def restart(self, epoch: int) -> None:
        self.pending = iter(self._pass(epoch))

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        ids = [i for _, i in zip(range(batch_size), self.pending)]
        if not ids:
            return None
        id_array = np.asarray(ids, np.int32)
        return {"id": id_array, "vec": np.stack([id_array, -id_array], 1).astype(np.float32)}

    def element_spec(self) -> dict[str, Any]:
        return {
            "id": jax.ShapeDtypeStruct((), np.int32),
            "vec": jax.ShapeDtypeStruct((2,), np.float32),
        }


@dataclass(frozen=True)
class TableConfig(StructuralConfig):
    """A user's host source config: ``num_records`` rows, shuffled from ``seed``."""

    num_records: int = N_HOST
    shuffle: bool = True
    seed: int = 3


def make_host_table_source(config: TableConfig, path: Path) -> Any:
    """A user-written random-access host source over a ``.npy`` file: ``__len__`` and
    ``read_records``; the base shuffles from the config's ``shuffle`` / ``seed`` and
    derives the spec from the first record."""
    from datarax.sources import RandomAccessSource

    class HostTable(RandomAccessSource):
        """Rows of a ``.npy`` table read by index (memory-mapped), one dict per record."""

        def __init__(self, config: TableConfig, path: Path) -> None:
            super().__init__(config, num_threads=2)
            self.path = str(path)
            self.length = int(np.load(self.path, mmap_mode="r").shape[0])

        def __len__(self) -> int:
            return self.length

        def read_records(self, indices: Any) -> list[dict[str, np.ndarray]]:
            rows = np.load(self.path, mmap_mode="r")
            return [{"id": np.int32(rows[i]), "vec": np.asarray([rows[i], -rows[i]], np.float32)}
                    for i in indices]

    return HostTable(config, path)


# --------------------------------------------------------------------- the rows
def _memory(as_list: bool) -> Callable[[Path], SourceRow]:
    def build(root: Path) -> SourceRow:
        def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
            x = np.arange(N_MEMORY, dtype=np.int32)
            y = np.stack([x, -x], 1).astype(np.float32)
            data: Any = {"x": x, "y": y}
            if as_list:
                data = [{"x": int(x[i]), "y": y[i]} for i in range(N_MEMORY)]
            source = MemorySource(MemorySourceConfig(shuffle=True, seed=7), data)
            return pipeline_over(source, shard_index, shard_count, stages)

        name = "memory_list" if as_list else "memory_dict"
        return SourceRow(name, make, N_MEMORY, lambda b: b["x"], shuffled=True, kind="INDEXED")

    return build


def _csv(root: Path) -> SourceRow:
    from reliability_sources import CSVDataSource, CSVDataSourceConfig

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        source = CSVDataSource(CSVDataSourceConfig(file_path=str(root / "rows.csv")))
        return pipeline_over(source, shard_index, shard_count, stages)

    # Row i holds i*10, i*10+1, i*10+2; the seed's source serves rows in file order. The
    # page tells its author to keep the rows in nnx.data, so they are in nnx.state.
    return SourceRow("csv_seed", make, N_CSV, lambda b: (b["features"][:, 0] / 10).astype(int),
                     kind="INDEXED", data_in_state=True)


def _array_record(root: Path) -> SourceRow:
    from reliability_arrayrecord import Decode

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=11, shuffle_files=True),
            str(root / "ar" / "data-*.array_record"),
            decode=Decode(),
            num_threads=2,
        )
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("array_record", make, N_AR, lambda b: b["id"], shuffled=True, kind="HOST")


def _tfds(streaming: bool) -> Callable[[Path], SourceRow]:
    def build(root: Path) -> SourceRow:
        from datarax.sources import (
            TFDSEagerConfig,
            TFDSEagerSource,
            TFDSStreamingConfig,
            TFDSStreamingSource,
        )

        def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
            common = dict(
                name="conformance_tiny", data_dir=str(root / "tfds"), shuffle=True, seed=5
            )
            if streaming:
                source: Any = TFDSStreamingSource(TFDSStreamingConfig(**common, num_threads=2))
            else:
                source = TFDSEagerSource(TFDSEagerConfig(**common))
            return pipeline_over(source, shard_index, shard_count, stages)

        name = "tfds_streaming" if streaming else "tfds_eager"
        return SourceRow(name, make, N_TFDS, lambda b: b["id"], shuffled=True,
                         kind="HOST" if streaming else "INDEXED")

    return build


def _hf(streaming: bool) -> Callable[[Path], SourceRow]:
    def build(root: Path) -> SourceRow:
        from datarax.sources import (
            HFEagerConfig,
            HFEagerSource,
            HFStreamingConfig,
            HFStreamingSource,
        )

        def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
            folder = str(root / "hf")
            if streaming:
                source: Any = HFStreamingSource(HFStreamingConfig(
                    name=folder, split="train", shuffle=True, seed=3, chunk_size=4,
                    shuffle_buffer_size=5,
                ))
            else:
                source = HFEagerSource(HFEagerConfig(
                    name=folder, split="train", shuffle=True, seed=3, exclude_keys=("sentence",)
                ))
            return pipeline_over(source, shard_index, shard_count, stages)

        name = "hf_streaming" if streaming else "hf_eager"
        return SourceRow(name, make, N_HF, lambda b: b["idx"], shuffled=True,
                         kind="STREAM" if streaming else "INDEXED")

    return build


def _stream(root: Path) -> SourceRow:
    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        source = ShuffledStream(ShuffledStreamConfig())
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("get_batch_stream", make, N_STREAM, lambda b: b["id"], shuffled=True,
                     kind="STREAM")


def _host_table(root: Path) -> SourceRow:
    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        source = make_host_table_source(TableConfig(), root / "host.npy")
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("user_random_access", make, N_HOST, lambda b: b["id"], shuffled=True,
                     kind="HOST")


def _cached_prefix(root: Path) -> SourceRow:
    """The user random-access source behind a CachedPrefix with a deterministic stage
    (first epoch computed and cached, later epochs served from memory)."""
    from datarax.dag import CachedPrefix

    def plus_thousand(batch: dict[str, Any]) -> dict[str, Any]:
        return {**batch, "shifted": batch["id"] + 1000}

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        table = make_host_table_source(TableConfig(), root / "host.npy")
        source = CachedPrefix(table, [plus_thousand], max_bytes=1 << 20)
        return pipeline_over(source, shard_index, shard_count, stages)

    def ids(batch: Any) -> Any:
        assert (np.asarray(batch["shifted"]) == np.asarray(batch["id"]) + 1000).all()
        return batch["id"]

    return SourceRow("cached_prefix", make, N_HOST, ids, shuffled=True, kind="HOST")


class OffsetStream(ShuffledStream):
    """:class:`ShuffledStream` whose ids start at ``offset`` (a part of the mixture row)."""

    offset = 10

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        batch = super().get_batch(batch_size)
        if batch is None:
            return None
        ids = batch["id"] + np.int32(self.offset)
        return {"id": ids, "vec": np.stack([ids, -ids], 1).astype(np.float32)}


def _mixture(root: Path) -> SourceRow:
    """Three kinds mixed by weight 6:4:4 over one epoch of each (14 records): records
    0-5 in memory, 6-9 a host table, 10-13 a forward-only stream."""
    from datarax.mixing import MixSource

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        memory = id_vec_memory(0, 6, seed=7)
        host = make_host_table_source(TableConfig(num_records=4), root / "mix_host.npy")
        stream = OffsetStream(ShuffledStreamConfig(num_records=4, seed=2))
        source = MixSource({"memory": memory, "host": host, "stream": stream},
                           weights={"memory": 6, "host": 4, "stream": 4}, seed=1,
                           records_per_epoch=14)
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("mixture", make, 14, lambda b: b["id"], shuffled=True, kind="HOST")


def _mixture_indexed(root: Path) -> SourceRow:
    """Two in-memory sources mixed 6:8 (14 records): the mixture compiles into the step."""
    from datarax.mixing import MixSource

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        parts = [id_vec_memory(0, 6, seed=7), id_vec_memory(6, 14, seed=8)]
        source = MixSource(parts, weights=[6, 8], seed=3, records_per_epoch=14)
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("mixture_indexed", make, 14, lambda b: b["id"], shuffled=True,
                     kind="INDEXED")


def _npy(root: Path) -> SourceRow:
    from datarax.sources import NpySource, NpySourceConfig

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        folder = root / "npy"
        config = NpySourceConfig(
            paths={"id": [str(folder / f"id-{k}.npy") for k in range(3)],
                   "vec": str(folder / "vec.npy")},
            shuffle=True, seed=9,
        )
        source = NpySource(config, num_threads=2)
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("npy_shards", make, N_NPY, lambda b: b["id"], shuffled=True, kind="HOST")


def _concat(root: Path) -> SourceRow:
    """Records 0-5 in memory (shuffled) then 6-9 from a host table: a host source."""
    from datarax.sources import ConcatSource

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        memory = id_vec_memory(0, 6, seed=7)
        host = make_host_table_source(TableConfig(num_records=4), root / "mix_host.npy")
        return pipeline_over(ConcatSource([memory, host]), shard_index, shard_count, stages)

    return SourceRow("concat", make, 10, lambda b: b["id"], shuffled=True, kind="HOST")


def _concat_indexed(root: Path) -> SourceRow:
    """Two shuffled in-memory parts, 0-5 and 6-13: the concatenation compiles into the step."""
    from datarax.sources import ConcatSource

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        parts = [id_vec_memory(0, 6, seed=7), id_vec_memory(6, 14, seed=8)]
        return pipeline_over(ConcatSource(parts), shard_index, shard_count, stages)

    return SourceRow("concat_indexed", make, 14, lambda b: b["id"], shuffled=True,
                     kind="INDEXED")


def _concat_stream(root: Path) -> SourceRow:
    """Records 0-5 in memory (shuffled) then 10-13 from a stream of unknown length,
    ids 6-9 as the row counts them: a stream concatenation."""
    from datarax.sources import ConcatSource

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        memory = id_vec_memory(0, 6, seed=7)
        stream = OffsetStream(ShuffledStreamConfig(num_records=4, seed=2))
        return pipeline_over(ConcatSource([memory, stream]), shard_index, shard_count, stages)

    def ids(batch: Any) -> Any:
        raw = np.asarray(batch["id"])
        return np.where(raw >= 10, raw - 4, raw)

    return SourceRow("concat_stream", make, 10, ids, shuffled=True, kind="STREAM")


def _flat_map(root: Path) -> SourceRow:
    """A shuffled MemorySource of 12 records, record r turned into r % 3 records (0, 1
    or 2: some records give none), 12 in all, numbered in record order."""
    from datarax.sources import FlatMapSource

    counts = np.arange(12) % 3
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])

    def expand(record: Any) -> list[dict[str, Any]]:
        r = int(record["r"])
        return [{"id": np.int32(firsts[r] + k), "vec": np.asarray([r, k], np.float32)}
                for k in range(int(counts[r]))]

    def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
        parent = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                              {"r": np.arange(12, dtype=np.int32)})
        source = FlatMapSource(parent, expand, max_outputs=2)
        return pipeline_over(source, shard_index, shard_count, stages)

    return SourceRow("flat_map", make, int(counts.sum()), lambda b: b["id"], shuffled=True,
                     kind="STREAM")


# name -> (builder, module the row needs or None)
ROWS: dict[str, tuple[Callable[[Path], SourceRow], str | None]] = {
    "memory_dict": (_memory(False), None),
    "memory_list": (_memory(True), None),
    "memory_text": (_memory_text, None),
    "csv_seed": (_csv, None),
    "array_record": (_array_record, "array_record.python.array_record_module"),
    "tfds_eager": (_tfds(False), "tensorflow_datasets"),
    "tfds_streaming": (_tfds(True), "tensorflow_datasets"),
    "hf_eager": (_hf(False), "datasets"),
    "hf_streaming": (_hf(True), "datasets"),
    "get_batch_stream": (_stream, None),
    "user_random_access": (_host_table, None),
    "mixture": (_mixture, None),
    "mixture_indexed": (_mixture_indexed, None),
    "npy_shards": (_npy, None),
    "cached_prefix": (_cached_prefix, None),
    "concat": (_concat, None),
    "concat_indexed": (_concat_indexed, None),
    "concat_stream": (_concat_stream, None),
    "flat_map": (_flat_map, None),
}
ROWS.update(REORDER_ROWS)  # interleave and shuffle-buffer rows: reorder_rows.py

# Rows whose source copy.deepcopy is checked (file-backed sources and the readers over
# them; in-memory ones are copied by NNX alone; the whole table costs ~15 s): the rest
# run the check with -m slow.
DEEPCOPY_ROWS = ("array_record", "tfds_streaming", "npy_shards", "user_random_access",
                 "cached_prefix", "concat", "interleave_array_record",
                 "shuffle_buffer_array_record", "get_batch_stream")
# Rows holding the user stream of this file (ShuffledStream: its pass a generator, which
# Python cannot copy): copy.deepcopy of their source is refused, naming that attribute.
UNCOPYABLE: dict[str, str] = {
    name: "'pending' (generator)" for name in
    ("get_batch_stream", "mixture", "concat_stream", "interleave", "interleave_mixture",
     "shuffle_buffer", "shuffle_buffer_mixture")
}

# Rows whose source API is still being settled: name -> reason (run as xfail).
PENDING: dict[str, str] = {}

# The table's costly clauses (every boundary, nnx, Orbax, live restores, threads): for the
# rows named here they run with -m slow only, the cheap clauses in the default run.
HEAVY_CLAUSES = (
    "test_resume_from_iterator_state",
    "test_resume_from_nnx_state",
    "test_resume_from_nnx_state_through_orbax",
    "test_source_restored_under_a_live_iterator_continues_from_there",
    "test_close_releases_threads",
)
# Rows whose reading path another row of the default run already takes through the costly
# clauses (memory_text: an indexed source, host text included; array_record: the host
# reader; hf_streaming, get_batch_stream: streams; user_random_access: a user's host
# source; mixture, mixture_indexed: both mixtures); these run them with -m slow only.
COVERED_ROWS = ("memory_dict", "memory_list", "csv_seed", "tfds_eager", "tfds_streaming",
                "hf_eager", "npy_shards", "cached_prefix")
SLOW_CLAUSES: dict[str, tuple[str, ...]] = {
    **{name: HEAVY_CLAUSES for name in COVERED_ROWS},
    "concat": HEAVY_CLAUSES,
    "concat_indexed": HEAVY_CLAUSES,
    "concat_stream": HEAVY_CLAUSES,
    "flat_map": HEAVY_CLAUSES,
    **{name: HEAVY_CLAUSES for name in REORDER_ROWS},
}
