"""Memory + ArrayRecord + a stream (and memory + a Hugging Face stream) in one mixture:
exact epochs and resume at every level."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import SourceRow, conformance

from number_sources import NumberStream, numbers
from source_reads import check_pipeline_resumes, flat

pytest.importorskip("array_record.python.array_record_module")


def decode(raw: bytes) -> dict:
    return {"id": np.frombuffer(raw, np.int32)[0]}


@pytest.fixture(scope="module")
def ar_glob(tmp_path_factory):
    from int_record_files import int32, write_parts

    folder = tmp_path_factory.mktemp("mix_ar")
    write_parts(folder, (range(100, 104), range(104, 107)), int32)
    return str(folder / "part-*.array_record")


def make_row(ar_glob: str) -> SourceRow:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    def make(shard_index=0, shard_count=1, stages=()):
        memory = numbers(0, 5, shuffle=True, seed=2, field="id")
        records = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=4, shuffle_files=True), ar_glob, decode=decode, num_threads=2
        )
        mix = MixSource({"memory": memory, "ar": records,
                         "stream": NumberStream(200, 204, field="id")},
                        weights={"memory": 0.5, "ar": 0.3, "stream": 0.2}, seed=8,
                        records_per_epoch=20)
        return Pipeline(mix, list(stages), batch_size=3, rngs=nnx.Rngs(0),
                        shard_index=shard_index, shard_count=shard_count)

    return SourceRow("memory+arrayrecord+stream", make, 20, lambda b: b["id"], kind="HOST")


def test_each_kind_runs_through_its_own_epochs(ar_glob):
    row = make_row(ar_glob)
    pipeline = row.make()
    ids = [int(i) for b in pipeline for i in np.asarray(b["id"])]
    row.close(pipeline)
    memory = [i for i in ids if i < 100]
    ar = [i for i in ids if 100 <= i < 200]
    stream = [i for i in ids if i >= 200]
    assert (len(memory), len(ar), len(stream)) == (10, 6, 4)
    assert sorted(memory[:5]) == sorted(memory[5:]) == [0, 1, 2, 3, 4]
    # 6 draws of the 7 ArrayRecord records: part of its first epoch, no repeat
    assert len(set(ar)) == 6 and set(ar) <= set(range(100, 107))
    assert stream == [200, 201, 202, 203]


@pytest.mark.parametrize("level", ["iterator", "pipeline", "source", "nnx"])
def test_resume_is_exact_at_every_level(ar_glob, level):
    row = make_row(ar_glob)
    points = None if level == "iterator" else conformance.key_points(row, 3)
    assert conformance.check_resume(row, level, points=points) == 21  # 3 epochs of 7 batches


def test_sampling_mode_reads_an_array_record_and_a_host_concatenation(ar_glob):
    """Sampled draws of host children: an ArrayRecord source through its reader (its
    first read raised AttributeError 'SampledOrder' has no 'runs') and a concatenation
    of one with memory (no reader of its own: AttributeError 'host_reader')."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule, ConcatSource

    def records():
        return ArrayRecordSourceModule(ArrayRecordSourceConfig(), ar_glob, decode=decode,
                                       num_threads=1)

    def build():
        both = ConcatSource([records(), numbers(0, 3, field="id")])
        mix = MixSource({"ar": records(), "both": both}, [1, 1], mode="sampling", seed=2,
                        records_per_epoch=12)
        return Pipeline(mix, [], batch_size=5)

    _, batches, _ = check_pipeline_resumes(build, lambda b: np.asarray(b["id"]).tolist())
    ids = flat(batches)
    assert len(ids) == 12 and set(ids) <= {0, 1, 2, *range(100, 107)}


def test_sampled_draws_of_a_host_concatenation_are_those_read_record_by_record_before():
    """A host child without a reader of its own (a concatenation of a host part and a
    memory part) serves its sampled draws through read_at, each run of adjacent records
    in one read: the same records in the same order as the record-by-record reads
    served (the values below, from ea469e1), repeats included."""
    from bad_rows import Rows, RowsConfig

    from datarax.sources import ConcatSource

    def floats(lo: int, hi: int) -> MemorySource:
        return MemorySource(MemorySourceConfig(), {"x": np.arange(lo, hi, dtype=np.float32)})

    both = ConcatSource([Rows(RowsConfig(), 12), floats(100, 104)])
    mix = MixSource({"both": both, "other": floats(500, 506)}, [3, 1], mode="sampling",
                    seed=5, records_per_epoch=24)
    pipeline = Pipeline(mix, [], batch_size=8)
    assert [[int(v) for v in np.asarray(b["x"])] for _ in range(2) for b in pipeline] == [
        [503, 11, 6, 8, 504, 10, 5, 0], [504, 0, 100, 10, 504, 8, 103, 11],
        [500, 103, 6, 2, 501, 3, 101, 101], [504, 7, 1, 0, 502, 4, 6, 11],
        [503, 7, 1, 2, 500, 100, 103, 102], [503, 9, 4, 100, 505, 5, 8, 3]]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    pytest.importorskip("datasets")
    from hf_files import write_jsonl

    folder = tmp_path_factory.mktemp("mix_hf")
    write_jsonl(folder / "train.jsonl", ({"id": i} for i in range(300, 306)))
    return str(folder)


def make_hf_row(hf_folder: str) -> SourceRow:
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    def make(shard_index=0, shard_count=1, stages=()):
        memory = numbers(0, 5, shuffle=True, seed=2, field="id")
        hf = HFStreamingSource(HFStreamingConfig(name=hf_folder, split="train", chunk_size=2))
        mix = MixSource({"memory": memory, "hf": hf}, weights={"memory": 0.6, "hf": 0.4},
                        seed=8, records_per_epoch=10)
        return Pipeline(mix, list(stages), batch_size=3, rngs=nnx.Rngs(0),
                        shard_index=shard_index, shard_count=shard_count)

    return SourceRow("memory+hf_streaming", make, 10, lambda b: b["id"], kind="HOST")


def test_a_hugging_face_stream_mixes_with_memory(hf_folder):
    row = make_hf_row(hf_folder)
    pipeline = row.make()
    ids = [int(i) for b in pipeline for i in np.asarray(b["id"])]
    memory = [i for i in ids if i < 100]
    hf = [i for i in ids if i >= 300]
    assert (len(memory), len(hf)) == (6, 4)
    assert hf == [300, 301, 302, 303]  # the stream in its own order, first pass
    assert len(set(memory[:5])) == 5  # memory: one whole epoch before any repeat


@pytest.mark.parametrize("level", ["iterator", "pipeline", "source"])
def test_a_hugging_face_stream_mixture_resumes_exactly(hf_folder, level):
    row = make_hf_row(hf_folder)
    points = None if level == "iterator" else conformance.key_points(row, 3)
    assert conformance.check_resume(row, level, points=points) == 12  # 3 epochs of 4 batches


def test_a_hugging_face_stream_that_skips_bad_records_mixes_each_good_record_once(
        tmp_path, hf_offline):
    """The stream's position passes its skipped record too: the mixture reads on from
    there (it moved the stream back to its count of draws before: 304 and 305 served
    twice, 310 and 311 left to the next epoch)."""
    pytest.importorskip("pyarrow")
    from hf_files import int32_lists, write_parquet

    from datarax.sources import HFStreamingConfig, HFStreamingSource

    vec = [[i, i] for i in range(12)]
    vec[3] = [3, 3, 3]  # record 3 does not batch with the others: skipped
    path = write_parquet(tmp_path / "train.parquet",
                         {"id": np.arange(300, 312, dtype=np.int32), "vec": int32_lists(vec)})
    hf = HFStreamingSource(HFStreamingConfig(name="parquet", data_files=path, chunk_size=4,
                                             on_error="skip"))
    memory = MemorySource(MemorySourceConfig(), {"id": np.arange(4, dtype=np.int32),
                                                 "vec": np.zeros((4, 2), np.int32)})
    mix = MixSource({"hf": hf, "memory": memory}, weights=[11, 4], seed=8, records_per_epoch=15)
    pipeline = Pipeline(mix, [], batch_size=4)
    for _ in range(2):
        ids = [int(i) for b in pipeline for i in np.asarray(b["id"])]
        assert sorted(i for i in ids if i >= 300) == [i for i in range(300, 312) if i != 303]


def sharded_stream_mixture(shard_index=0, shard_count=1, stages=()):
    memory = numbers(0, 6, shuffle=True, seed=7, field="id")
    mix = MixSource({"memory": memory, "stream": NumberStream(10, 14, field="id")},
                    weights={"memory": 6, "stream": 4}, seed=1, records_per_epoch=10)
    return Pipeline(mix, list(stages), batch_size=2, shard_index=shard_index,
                    shard_count=shard_count)


def test_a_shard_of_a_mixture_with_a_stream_reads_across_the_stream_passes():
    whole = sharded_stream_mixture()
    epochs = [[int(i) for b in whole for i in np.asarray(b["id"])] for _ in range(3)]
    shards = [sharded_stream_mixture(i, 2) for i in range(2)]
    for epoch in epochs:  # each shard skips the other's draws of the stream, passes and all
        assert [int(i) for s in shards for b in s for i in np.asarray(b["id"])] == epoch
    row = SourceRow("stream mixture, shard 1 of 2", lambda **kw: sharded_stream_mixture(
        1, 2, kw.get("stages", ())), 5, lambda b: b["id"])
    assert conformance.check_resume(row, "pipeline", num_epochs=3) == 12


def _text_mixture(mode: str, records_per_epoch: int | None) -> MixSource:
    words = MemorySource(
        MemorySourceConfig(shuffle=mode == "epoch", seed=2),
        {"t": np.asarray([f"w{i}" for i in range(6)]), "x": np.arange(6, dtype=np.int32)},
    )
    other = MemorySource(
        MemorySourceConfig(), {"t": np.asarray(["a", "b"]), "x": np.arange(100, 102, dtype=np.int32)}
    )
    return MixSource(
        {"words": words, "other": other},
        weights={"words": 3, "other": 1},
        mode=mode,
        records_per_epoch=records_per_epoch,
    )


@pytest.mark.parametrize(("mode", "records_per_epoch"), [("epoch", None), ("sampling", 9)])
def test_in_memory_sources_with_text_fields_mix_with_their_text(mode, records_per_epoch):
    from datarax.testing import check_resume_exact

    pipeline = Pipeline(source=_text_mixture(mode, records_per_epoch), stages=[], batch_size=4)
    batches = [batch for _ in range(2) for batch in pipeline]
    text = {"w0": 0, "w1": 1, "w2": 2, "w3": 3, "w4": 4, "w5": 5, "a": 100, "b": 101}
    for batch in batches:
        assert isinstance(batch["t"], list) and all(type(t) is str for t in batch["t"])
        assert [text[t] for t in batch["t"]] == np.asarray(batch["x"]).tolist()
    served = sum(len(batch["t"]) for batch in batches)
    assert served == 2 * (records_per_epoch or 8)
    if mode == "sampling":
        return  # (resume of a sampled host mixture: tests/mixing/test_mix_source.py)
    check_resume_exact(
        lambda: Pipeline(source=_text_mixture(mode, records_per_epoch), stages=[], batch_size=3),
        [1, 2, 4],
        num_epochs=2,
    )
