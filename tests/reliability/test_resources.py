"""Clean resources: closing iterators leaves no threads and no memory growth.

Assertions are on counts and bytes, never on time. "Noise" for RSS is a fixed
allowance (8 MiB for the second half of 1,000 rounds) far below what keeping one
batch or one compiled step per round would cost.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sources.host_reader import HostReader
from datarax.sources.epoch_order import EpochOrder

from reliability_sources import CountingStream, CountingStreamConfig, make_memory_pipeline, stages
from resources import measure, new_threads, settle_threads

MiB = 1 << 20
NOISE = 8 * MiB


def _stream_pipeline(n: int = 50, bs: int = 8) -> Pipeline:
    return Pipeline(
        source=CountingStream(CountingStreamConfig(num_records=n)), stages=stages(True),
        batch_size=bs, rngs=nnx.Rngs(0), shard_index=0, shard_count=1,
    )


def test_iterators_are_context_managers_and_close_ends_the_epoch():
    pipeline = make_memory_pipeline(10, 3, shard_index=0, shard_count=1)
    with iter(pipeline) as it:
        first = next(it)
    assert first["x"].shape == (3,)
    with pytest.raises(StopIteration):
        next(it)
    assert pipeline.get_state()["position"] == 3  # closing keeps the handed-out count


@pytest.mark.parametrize("kind", ["memory", "stream"])
@pytest.mark.slow
def test_thousand_iterators_leave_no_threads_and_no_rss_growth(kind):
    pipeline = (
        make_memory_pipeline(64, 8, shuffle=True, stochastic=True, shard_index=0, shard_count=1)
        if kind == "memory" else _stream_pipeline()
    )

    def body(_: int) -> None:
        with iter(pipeline) as it:
            next(it)
            next(it)

    result = measure(body, rounds=1000 if kind == "memory" else 300)
    assert result.threads_after == result.threads_before
    assert result.growth_second_half < NOISE, result


def test_pipelines_built_and_dropped_do_not_grow():
    def body(_: int) -> None:
        pipeline = make_memory_pipeline(16, 4, stochastic=True, shard_index=0, shard_count=1)
        with iter(pipeline) as it:
            next(it)

    # RSS is flat from the 10th build on (a clean run grows ~0 MiB in the second half);
    # the first half of the measured rounds warms up further before the mid-point.
    result = measure(body, rounds=150, warmup=10)
    assert result.threads_after == result.threads_before
    assert result.growth_second_half < NOISE, result


def test_long_streaming_run_holds_memory_flat():
    pipeline = _stream_pipeline(n=40, bs=8)
    counts = []

    def body(_: int) -> None:
        counts.append(sum(len(b["id"]) for b in pipeline))

    result = measure(body, rounds=200, warmup=20)
    assert set(counts) == {40}
    assert pipeline.get_state()["epoch"] == 220  # 220 passes ended
    assert result.threads_after == result.threads_before
    assert result.growth_second_half < NOISE, result


@pytest.mark.parametrize("rounds", [100, pytest.param(1000, marks=pytest.mark.slow)])
def test_host_reader_sessions_join_their_threads(rounds):
    """The shared reader of file-backed sources: many sessions, no thread left over."""
    data = [np.int32(i).tobytes() for i in range(64)]
    decode = lambda raw: {"x": np.frombuffer(raw, np.int32)[0]}  # noqa: E731
    baseline = set(threading.enumerate())

    def body(i: int) -> None:
        with HostReader(data, decode, num_threads=2) as reader:
            reader.start(EpochOrder(length=64, seed=i, epoch=0))
            assert len(reader.next_batch(8)) == 8

    result = measure(body, rounds=rounds, warmup=20)
    settle_threads(baseline)
    assert new_threads(baseline) == []
    assert result.threads_after == result.threads_before
    assert result.growth_second_half < NOISE, result


# ----------------------------------------------------------- file-backed sources
@pytest.fixture(scope="module")
def ar_glob(tmp_path_factory):
    pytest.importorskip("datarax.sources.array_record")
    from reliability_arrayrecord import write_files

    return write_files(tmp_path_factory.mktemp("ar_res"), 64, num_files=2)


def test_sources_are_context_managers(ar_glob, tmp_path):
    from datarax.sources import MemorySource, MemorySourceConfig
    from reliability_arrayrecord import make_arrayrecord_pipeline
    from reliability_sources import CSVDataSource, CSVDataSourceConfig, write_csv

    baseline = set(threading.enumerate())
    sources = [
        MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)}),
        CSVDataSource(CSVDataSourceConfig(file_path=write_csv(tmp_path / "a.csv", 4))),
        CountingStream(CountingStreamConfig(num_records=4)),
        make_arrayrecord_pipeline(ar_glob, 8, num_threads=3).source,
    ]
    for source in sources:
        with source as entered:
            assert entered is source
            pipeline = Pipeline(source=source, stages=[], batch_size=2, shard_index=0, shard_count=1)
            it = iter(pipeline)
            next(it)  # reader threads (ArrayRecord) are running now, mid-epoch
        source.close()  # closing twice is safe
    del it
    settle_threads(baseline)
    assert new_threads(baseline) == []


@pytest.mark.parametrize("rounds", [pytest.param(200, marks=pytest.mark.slow), pytest.param(1000, marks=pytest.mark.slow)])
def test_arrayrecord_iterators_leave_no_threads_and_no_rss_growth(ar_glob, rounds):
    from reliability_arrayrecord import make_arrayrecord_pipeline

    pipeline = make_arrayrecord_pipeline(ar_glob, 8, shuffle=True, num_threads=3)

    def body(_: int) -> None:
        with iter(pipeline) as it:
            next(it)
            next(it)  # the reader reads ahead on its threads; close() must join them

    baseline = set(threading.enumerate())
    result = measure(body, rounds=rounds, warmup=20)
    assert result.threads_after == result.threads_before
    assert result.growth_second_half < NOISE, result
    pipeline.source.close()
    settle_threads(baseline)
    assert new_threads(baseline) == []


@pytest.mark.slow  # ~4 s
def test_long_arrayrecord_run_holds_memory_flat(ar_glob):
    from reliability_arrayrecord import make_arrayrecord_pipeline

    pipeline = make_arrayrecord_pipeline(ar_glob, 16, shuffle=True, num_threads=2)
    counts = []

    def body(_: int) -> None:
        counts.append(sum(len(b["id"]) for b in pipeline))

    result = measure(body, rounds=100, warmup=10)
    assert set(counts) == {64}
    assert result.growth_second_half < NOISE, result
    pipeline.source.close()
