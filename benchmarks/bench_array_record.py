"""W2: one shuffled epoch of ArrayRecord files, datarax beside the raw floor and Grain.

Workload: 100,000 records of 3,072 bytes in 8 files, global shuffle, decode each
record to ``uint8 (32, 32, 3)``, batch 256, one epoch. Files are generated once under
``data/bench_arrayrecord/`` (gitignored) and warmed into the page cache.

Contenders (all in this one process, one after another):

* ``floor`` — array_record's own ``ArrayRecordReader`` per file (the options Grain's
  data source uses), the same shuffled order precomputed, the reads for 8 batches
  issued at once (one ``read(positions)`` per file per 2,048 records: fewer, larger
  reads measured fastest), then only ``np.frombuffer`` into the batches.
  Single thread; no per-record decode function, no checks, no state.
* ``datarax`` — ``ArrayRecordSourceModule(shuffle_files=True)`` with a per-record
  ``decode``, batches via ``get_batch_with_indices(256)`` (numpy batches + stable
  indices, the host path's work without the device transfer).
* ``datarax_pipeline`` — the same through ``Pipeline(batch_size=256)`` (adds the
  device placement per batch the host path does).
* ``datarax_self_described`` — the same records written once as a datarax dataset
  (``write_dataset``, 8 shards, under ``data/bench_arrayrecord/``; a record of a
  fixed-shape field is exactly its bytes) read through a Pipeline with no user code:
  ``ArrayRecordSourceModule(config, paths=<folder>)``.
* ``grain_*`` — ``grain.MapDataset.source(ArrayRecordDataSource).shuffle(seed)
  .map(decode).batch(256)`` iterated with ``to_iter_dataset(ReadOptions(num_threads))``
  for several thread counts, and with ``mp_prefetch``; the best one is "Grain".

Every contender's epoch is checked: 100,000 distinct records, each intact. The
contenders run in turn, ``--repeats`` rounds; besides each one's best round, the JSON
has every round's seconds and CPU seconds (user + sys of the process, which other jobs
on a shared machine disturb less than the wall clock) and the median over rounds of
each round's ratio to the floor's run of the same round.

Run: ``env -u PYTHONDONTWRITEBYTECODE python -m benchmarks.bench_array_record
[--records N] [--repeats R] [--only NAME ...]``; prints
records/s and the ratios, and ``--json PATH`` writes them. ``run_w2(...)`` returns the
same dict for the full suite.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from benchmarks.harness import emit, parser

RECORD_SHAPE = (32, 32, 3)
RECORD_BYTES = 32 * 32 * 3
ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "bench_arrayrecord"


# ------------------------------------------------------------------------ data
def make_files(records: int = 100_000, files: int = 8, directory: pathlib.Path = DATA_DIR,
               seed: int = 0) -> list[str]:
    """Write (once) ``records`` random 3,072-byte records in ``files`` ArrayRecord files.

    Record ``i`` starts with its index as 4 little-endian bytes so an epoch can be
    checked; files use ``group_size:1`` (the random-access layout Grain asks for).
    """
    from array_record.python.array_record_module import ArrayRecordWriter

    directory = pathlib.Path(directory) / f"n{records}_f{files}"
    directory.mkdir(parents=True, exist_ok=True)
    paths = [str(directory / f"w2-{f:05d}-of-{files:05d}.array_record") for f in range(files)]
    done = directory / "DONE"
    if done.exists():
        return paths
    rng = np.random.default_rng(seed)
    per_file = -(-records // files)
    index = 0
    for path in paths:
        writer = ArrayRecordWriter(path, "group_size:1")
        for _ in range(min(per_file, records - index)):
            payload = rng.integers(0, 256, RECORD_BYTES, dtype=np.uint8)
            payload[:4] = np.frombuffer(np.uint32(index).tobytes(), np.uint8)
            writer.write(payload.tobytes())
            index += 1
        writer.close()
    done.write_text("ok\n")
    return paths


def read_metadata_paths(folder: str) -> list[str]:
    """The shard files of the dataset in ``folder``."""
    from datarax.dataset import read_metadata

    return [str(pathlib.Path(folder) / s.file) for s in read_metadata(folder).shards]


def warm(paths: list[str]) -> None:
    """Read every file once so all contenders start from the page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"image": np.frombuffer(record, dtype=np.uint8).reshape(RECORD_SHAPE)}


def record_ids(images: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(np.asarray(images).reshape(len(images), -1)[:, :4])
    return flat.view(np.uint32).reshape(-1)


class Check:
    """Collects record ids served in one epoch and checks every record came once."""

    def __init__(self, records: int) -> None:
        self.records = records
        self.ids: list[np.ndarray] = []

    def add(self, images: Any) -> None:
        self.ids.append(record_ids(images))

    def verify(self, name: str) -> None:
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.uint32)
        if len(ids) != self.records or len(np.unique(ids)) != self.records:
            raise AssertionError(f"{name}: served {len(ids)} records, "
                                 f"{len(np.unique(ids))} distinct, expected {self.records}")


# ------------------------------------------------------------------- contenders
def epoch_order(records: int, seed: int) -> np.ndarray:
    from datarax.sources.epoch_order import EpochOrder

    return EpochOrder(records, seed, 0).indices(0, records)


FLOOR_BATCHES_PER_READ = 8  # the floor issues the reads of 8 batches at once


def open_floor_readers(paths: list[str], buffer: int = 32768) -> list[Any]:
    """The floor's readers: no read-ahead, a ``buffer``-byte file buffer."""
    from array_record.python.array_record_module import ArrayRecordReader

    return [ArrayRecordReader(p, "readahead_buffer_size:0", file_reader_buffer_size=buffer)
            for p in paths]


def floor_positions(readers: list[Any], order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which file, and where in it, each record of ``order`` is."""
    ends = np.cumsum([r.num_records() for r in readers])
    file_of = np.searchsorted(ends, order, side="right")
    return file_of, order - np.concatenate([[0], ends[:-1]])[file_of]


def floor_batches(readers: list[Any], file_of: np.ndarray, within: np.ndarray, batch: int,
                  per_read: int = FLOOR_BATCHES_PER_READ) -> Iterator[np.ndarray]:
    """The floor's epoch: ``per_read`` batches' records read per call of each file's
    reader, into one array, served ``batch`` records at a time."""
    group = batch * per_read
    for lo in range(0, len(file_of), group):
        files, positions = file_of[lo:lo + group], within[lo:lo + group]
        out = np.empty((len(files), *RECORD_SHAPE), np.uint8)
        flat = out.reshape(len(files), -1)
        for f in np.unique(files):
            slots = np.nonzero(files == f)[0]
            raw = readers[f].read(positions[slots].tolist())
            flat[slots] = np.frombuffer(b"".join(raw), np.uint8).reshape(len(slots), -1)
        for b in range(0, len(files), batch):
            yield out[b:b + batch]


def run_floor(paths: list[str], records: int, batch: int, seed: int) -> tuple[float, float]:
    readers = open_floor_readers(paths)
    file_of, within = floor_positions(readers, epoch_order(records, seed))
    check = Check(records)
    start, cpu_start = time.perf_counter(), time.process_time()
    for images in floor_batches(readers, file_of, within, batch):
        check.add(images)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    for r in readers:
        r.close()
    check.verify("floor")
    return elapsed, cpu


def checked_epoch(source: Any, batches: Iterable[dict[str, Any]], records: int,
                  name: str) -> tuple[float, float]:
    """Seconds and process CPU seconds of one epoch of ``batches`` (its first asked for
    on the clock; ``source``'s spec read before), every record's id checked, then
    ``source`` closed and the check verified (``name`` in its error)."""
    source.element_spec()
    check = Check(records)
    start, cpu_start = time.perf_counter(), time.process_time()
    for out in batches:
        check.add(out["image"])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    source.close()
    check.verify(name)
    return elapsed, cpu


def _source_batches(source: Any, batch: int) -> Iterator[dict[str, Any]]:
    source.seek(0)
    while True:
        out, _ = source.get_batch_with_indices(batch)
        if out is None:
            return
        yield out


def run_datarax(paths: list[str], records: int, batch: int, seed: int,
                num_threads: int = 4) -> tuple[float, float]:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=seed, shuffle_files=True),
                                     paths, decode=decode, num_threads=num_threads)
    return checked_epoch(source, _source_batches(source, batch), records, "datarax")


def decode_batch(records: list[bytes]) -> dict[str, np.ndarray]:
    """Every record of a chunk at once (the records have a fixed layout)."""
    return {"image": np.frombuffer(b"".join(records), dtype=np.uint8).reshape(-1, *RECORD_SHAPE)}


def make_dataset(paths: list[str], records: int) -> str:
    """Write (once) the records of ``paths`` as a datarax dataset beside them, in the
    same order and as many shards; return its folder."""
    from array_record.python.array_record_module import ArrayRecordReader

    from datarax.dataset import write_dataset
    from datarax.dataset.metadata import METADATA_FILE

    folder = pathlib.Path(paths[0]).parent / "dataset"
    if (folder / METADATA_FILE).exists():
        return str(folder)

    def rows() -> Any:
        for path in paths:
            reader = ArrayRecordReader(path)
            for raw in reader.read_all():
                yield decode(raw)
            reader.close()

    write_dataset(rows(), folder, shards=len(paths), overwrite=True)
    return str(folder)


def run_self_described(folder: str, records: int, batch: int, seed: int) -> tuple[float, float]:
    """A Pipeline over a dataset folder: no decode, no user code."""
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=seed, shuffle_files=True), folder)
    pipeline = Pipeline(source=source, stages=[], batch_size=batch)
    return checked_epoch(source, pipeline, records, "datarax_self_described")


def run_datarax_pipeline(paths: list[str], records: int, batch: int, seed: int,
                         by_chunk: bool = False, processes: int = 0) -> tuple[float, float]:
    """The source read by a Pipeline; ``by_chunk``: records decoded a chunk at a time
    (``decode_batch``) instead of one by one (``decode``); ``processes``: decoded by
    that many worker processes (``decode_processes``; their start is timed, as Grain's
    worker processes' is)."""
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    decoding = {"decode_batch": decode_batch} if by_chunk else {"decode": decode}
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=seed, shuffle_files=True),
                                     paths, decode_processes=processes, **decoding)
    pipeline = Pipeline(source=source, stages=[], batch_size=batch)
    return checked_epoch(source, pipeline, records, "datarax_decode_batch" if by_chunk else
                         f"datarax_processes{processes}" if processes else "datarax_pipeline")


def _grain_dataset(paths: list[str], batch: int, seed: int) -> Any:
    import grain

    source = grain.sources.ArrayRecordDataSource(paths)
    return (grain.MapDataset.source(source).shuffle(seed=seed).map(decode)
            .batch(batch, drop_remainder=False))


def run_grain_threads(paths: list[str], records: int, batch: int, seed: int,
                      num_threads: int = 16) -> tuple[float, float]:
    import grain

    ds = _grain_dataset(paths, batch, seed).to_iter_dataset(
        grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=max(2 * num_threads, 8)))
    check = Check(records)
    start, cpu_start = time.perf_counter(), time.process_time()
    for out in ds:
        check.add(out["image"])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    check.verify(f"grain_threads{num_threads}")
    return elapsed, cpu


def run_grain_mp(paths: list[str], records: int, batch: int, seed: int,
                 workers: int = 2) -> tuple[float, float]:
    import grain
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain's worker processes read absl flags
        flags.FLAGS.mark_as_parsed()

    ds = _grain_dataset(paths, batch, seed).to_iter_dataset(
        grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)
    ).mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    check = Check(records)
    start, cpu_start = time.perf_counter(), time.process_time()
    it = iter(ds)
    for out in it:
        check.add(out["image"])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    check.verify(f"grain_mp{workers}")
    return elapsed, cpu


CONTENDERS: dict[str, Callable[..., tuple[float, float]]] = {
    "floor": run_floor,
    "datarax": run_datarax,
    "datarax_pipeline": run_datarax_pipeline,
    "datarax_self_described": lambda p, *a: run_self_described(make_dataset(p, a[0]), *a),
    "datarax_decode_batch": lambda *a: run_datarax_pipeline(*a, by_chunk=True),
    "datarax_processes2": lambda *a: run_datarax_pipeline(*a, processes=2),
    "grain_threads4": lambda *a: run_grain_threads(*a, num_threads=4),
    "grain_threads16": lambda *a: run_grain_threads(*a, num_threads=16),
    "grain_mp2": lambda *a: run_grain_mp(*a, workers=2),
}


def run_w2(records: int = 100_000, files: int = 8, batch: int = 256, seed: int = 0,
           repeats: int = 2, contenders: list[str] | None = None,
           data_dir: pathlib.Path | str = DATA_DIR) -> dict[str, Any]:
    """Run W2 and return records/s per contender plus the headline ratios."""
    paths = make_files(records, files, pathlib.Path(data_dir))
    names = contenders or list(CONTENDERS)
    if "datarax_self_described" in names:
        make_dataset(paths, records)
        warm(read_metadata_paths(make_dataset(paths, records)))
    warm(paths)
    load_start = round(os.getloadavg()[0], 2)
    rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for _ in range(repeats):  # interleaved rounds
        for name in names:
            rounds[name].append(CONTENDERS[name](paths, records, batch, seed))
    best = {name: min(runs) for name, runs in rounds.items()}
    seconds = {name: b[0] for name, b in best.items()}
    cpu = {name: b[1] for name, b in best.items()}
    rate = {name: records / s for name, s in seconds.items()}
    grain_names = [n for n in rate if n.startswith("grain")]
    result: dict[str, Any] = {
        "workload": f"W2: {records} records x {RECORD_BYTES} B in {files} ArrayRecord files, "
                    f"global shuffle, decode uint8{RECORD_SHAPE}, batch {batch}, one epoch",
        "cpus": os.cpu_count(),
        "load_average_1m": load_start,
        "load_average_1m_end": round(os.getloadavg()[0], 2),
        "repeats": repeats,
        "records_per_s": {k: round(v) for k, v in rate.items()},
        # CPU seconds of this process during the timed epoch (all its threads,
        # array_record's C++ read threads included; Grain's worker processes excluded).
        "process_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "seconds_per_round": {k: [round(r[0], 3) for r in v] for k, v in rounds.items()},
        "process_cpu_s_per_round": {k: [round(r[1], 3) for r in v] for k, v in rounds.items()},
    }
    if "floor" in rounds:
        floor = [r[0] for r in rounds["floor"]]
        result["median_round_ratio_vs_floor"] = {
            k: round(float(np.median([f / r[0] for f, r in zip(floor, v)])), 3)
            for k, v in rounds.items() if k != "floor"}
        result["median_cpu_s"] = {k: round(float(np.median([r[1] for r in v])), 3)
                                  for k, v in rounds.items()}
    if "floor" in rate and "datarax" in rate:
        result["datarax_vs_floor"] = round(rate["datarax"] / rate["floor"], 3)
    if "floor" in rate and "datarax_pipeline" in rate:
        result["datarax_pipeline_vs_floor"] = round(rate["datarax_pipeline"] / rate["floor"], 3)
    if "floor" in rate and "datarax_self_described" in rate:
        result["datarax_self_described_vs_floor"] = round(
            rate["datarax_self_described"] / rate["floor"], 3)
    if "floor" in rate and "datarax_processes2" in rate:
        result["datarax_processes2_vs_floor"] = round(rate["datarax_processes2"] / rate["floor"], 3)
    if "floor" in rate and "datarax_decode_batch" in rate:
        result["datarax_decode_batch_vs_floor"] = round(rate["datarax_decode_batch"] / rate["floor"], 3)
    if grain_names and "datarax" in rate:
        best = max(grain_names, key=rate.__getitem__)
        result["grain_best"] = best
        result["datarax_vs_grain"] = round(rate["datarax"] / rate[best], 3)
        if "floor" in rate:
            result["grain_vs_floor"] = round(rate[best] / rate["floor"], 3)
    return result


def main() -> None:
    options = parser(__doc__, records=100_000, files=8, batch=256, repeats=2)
    options.add_argument("--only", nargs="*", default=None, help="contender names")
    options.add_argument("--json", default=None)
    options.add_argument("--data-dir", default=str(DATA_DIR))
    args = options.parse_args()
    result = run_w2(args.records, args.files, args.batch, repeats=args.repeats,
                    contenders=args.only, data_dir=args.data_dir)
    emit(result, args.json)


if __name__ == "__main__":
    main()
