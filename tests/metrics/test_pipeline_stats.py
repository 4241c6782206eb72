"""What ``pipeline.stats()`` reports: counts of the batches ``Pipeline.scan`` consumed and
its first call per length as start-up (``compile``); zeros before the first batch; no
count for a batch that raised; snapshots from another thread while a loop runs; the
counters of a composite's children under ``source``."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.spec import array_to_spec_strip_leading
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, MixSource, StreamSource


def test_scan_counts_batches_and_puts_its_first_call_under_compile():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(60, dtype=np.float32)})
    pipeline = Pipeline(source=source, stages=[], batch_size=5)

    def step(batch):
        return jnp.sum(batch["x"]) + 0.5  # a step of this test only: its program is new

    assert pipeline.scan(step, length=3).tolist() == [10.5, 35.5, 60.5]
    first = pipeline.stats()
    assert (first["batches"], first["records"]) == (3, 15)
    assert first["seconds"]["compile"] > 0 and first["seconds"]["step"] == 0.0
    assert pipeline.scan(step, length=3).tolist() == [85.5, 110.5, 135.5]
    second = pipeline.stats()
    assert (second["batches"], second["records"]) == (6, 30)
    assert second["seconds"]["compile"] == first["seconds"]["compile"]
    assert second["seconds"]["step"] > 0 and second["bottleneck"] == "step"


TIMERS = ["compile", "read", "stages", "step", "transfer", "validate", "wait"]


def _pipeline(stages=(), prefetch=0, n=60):
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.float32)})
    return Pipeline(source=source, stages=list(stages), batch_size=5, prefetch=prefetch)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_stats_of_a_pipeline_never_iterated_are_zeros_with_every_timer(prefetch):
    pipeline = _pipeline(prefetch=prefetch)
    iter(pipeline)  # an iterator made but not advanced has handed nothing out
    stats = pipeline.stats()
    assert (stats["batches"], stats["records"], stats["bottleneck"]) == (0, 0, None)
    assert sorted(stats["seconds"]) == sorted(stats["ms_per_batch"]) == TIMERS
    assert set(stats["ms_per_batch"].values()) == {0.0}
    assert "source" not in stats and "filter" not in stats


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_first_batch_that_raises_is_not_counted(prefetch):
    def broken(batch):
        raise ValueError("broken stage")

    pipeline = _pipeline(stages=[broken], prefetch=prefetch)
    with pytest.raises(ValueError, match="broken stage"):
        next(iter(pipeline))
    stats = pipeline.stats()
    assert (stats["batches"], stats["records"]) == (0, 0)
    assert all(seconds >= 0 for seconds in stats["seconds"].values())


@pytest.mark.parametrize("prefetch", [0, 2])
def test_stats_read_from_another_thread_count_up_to_what_was_served(prefetch):
    pipeline = _pipeline(stages=[lambda batch: {"x": batch["x"] * 2}], prefetch=prefetch)
    done, snapshots = threading.Event(), []

    def monitor():
        while not done.is_set():
            snapshots.append(pipeline.stats())

    watcher = threading.Thread(target=monitor)
    watcher.start()
    try:
        served = [np.asarray(batch["x"]).tobytes() for batch in pipeline]
    finally:
        done.set()
        watcher.join()
    snapshots.append(pipeline.stats())
    counts = [(s["batches"], s["records"]) for s in snapshots]
    assert counts == sorted(counts) and counts[-1] == (12, 60)
    assert all(b <= 12 and r <= 60 for b, r in counts)
    unwatched = [np.asarray(batch["x"]).tobytes() for batch in _pipeline(
        stages=[lambda batch: {"x": batch["x"] * 2}], prefetch=prefetch)]
    assert served == unwatched  # reading stats changes no batch


class Counted(StreamSource):
    """A stream that keeps counters of its own, as a source of remote files does."""

    def __init__(self, n: int):
        super().__init__(StructuralConfig())
        self.n, self.next_value, self.reads = n, 0, 0

    def restart(self, epoch):
        self.next_value = 0

    def get_batch(self, batch_size):
        if self.next_value >= self.n:
            return None
        x = np.arange(self.next_value, min(self.n, self.next_value + batch_size), dtype=np.float32)
        self.next_value += len(x)
        self.reads += 1
        return {"x": x}

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros(1, np.float32))}

    def stats(self):
        return {"storage": {"reads": self.reads}}


def test_a_composite_reports_the_counters_of_its_children_that_keep_some():
    local = MemorySource(MemorySourceConfig(), {"x": np.arange(20, dtype=np.float32)})
    mix = MixSource({"web": Counted(20), "local": local}, weights={"web": 1, "local": 1},
                    seed=0, records_per_epoch=40)
    pipeline = Pipeline(source=mix, stages=[], batch_size=10)
    assert sum(len(batch["x"]) for batch in pipeline) == 40
    stats = pipeline.stats()
    assert list(stats["source"]) == ["children"]
    assert list(stats["source"]["children"]) == ["web"]  # the memory source keeps none
    assert stats["source"]["children"]["web"]["storage"]["reads"] > 0

    parts = ConcatSource([MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.float32)}),
                          Counted(5)])
    assert parts.stats() == {"children": {"1": {"storage": {"reads": 0}}}}
    local_only = Pipeline(source=ConcatSource([MemorySource(
        MemorySourceConfig(), {"x": np.arange(5, dtype=np.float32)})]), batch_size=5)
    assert "source" not in local_only.stats()


def test_a_timer_adds_its_blocks_seconds_to_its_name_also_when_the_block_raises(monkeypatch):
    from types import SimpleNamespace

    from datarax.pipeline import stats as stats_module

    ticks = iter([10.0, 12.5, 20.0, 20.25])  # perf_counter at each block's entry and exit
    monkeypatch.setattr(stats_module, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    stats = stats_module.PipelineStats()
    with stats.timer("read"):
        pass
    with pytest.raises(ValueError, match="bad record"), stats.timer("read"):
        raise ValueError("bad record")
    assert stats.seconds == {**dict.fromkeys(TIMERS, 0.0), "read": 2.75}
