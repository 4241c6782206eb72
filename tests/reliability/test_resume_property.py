"""Exact resume, property-based: interrupt anywhere, restore from JSON, compare.

Every source kind runs through ``datarax.testing.check_resume_exact``: the batches of
a run interrupted at random points (mid-epoch, on the epoch boundary, several times in
a row), each time saved as JSON, rebuilt from scratch and restored, equal the
uninterrupted run bit for bit (values, order, augmentation draws).

The default profile is small; ``-m slow`` runs a bigger one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datarax.core.errors import ConfigError
from datarax.pipeline import Pipeline
from datarax.testing import check_resume_exact, collect

from number_sources import NumberStream
from reliability_sources import (
    CountingStream,
    CountingStreamConfig,
    CSVDataSource,
    CSVDataSourceConfig,
    make_memory_pipeline,
    stages,
    write_csv,
)

FAST = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SLOW = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# A few dataset sizes keep the number of distinct compiled steps small.
SIZES = st.sampled_from([1, 5, 8, 13])
BATCH = st.integers(1, 5)


def _points(draw, num_records: int, batch_size: int, epochs: int) -> list[int]:
    bound = math.ceil(num_records / batch_size) * epochs
    return draw(st.lists(st.integers(0, bound), max_size=4))


@st.composite
def memory_cases(draw):
    n = draw(SIZES)
    bs = draw(BATCH)
    epochs = draw(st.integers(1, 3))
    count = draw(st.sampled_from([1, 1, 2, 3]))
    return dict(
        num_records=n,
        batch_size=bs,
        shuffle=draw(st.booleans()),
        as_list=draw(st.booleans()),
        stochastic=draw(st.booleans()),
        drop_remainder=draw(st.booleans()),
        shard_count=count,
        shard_index=draw(st.integers(0, count - 1)),
        epochs=epochs,
        level=draw(st.sampled_from(["pipeline", "iterator"])),
        points=_points(draw, n, bs, epochs),
    )


def _run_memory(case: dict) -> None:
    case = dict(case)
    epochs, level, points = case.pop("epochs"), case.pop("level"), case.pop("points")
    share = case["num_records"] // case["shard_count"] if case["shard_count"] > 1 else case["num_records"]
    if share == 0:
        # more processes than records: refused at construction, naming pad_remainder
        with pytest.raises(ConfigError, match="no process would serve any"):
            make_memory_pipeline(**case)
        return
    if case["drop_remainder"] and case["batch_size"] > share:
        # every batch would be dropped: refused at construction (data at the edges, item 7)
        with pytest.raises(ConfigError, match="drop_remainder"):
            make_memory_pipeline(**case)
        return
    report = check_resume_exact(
        lambda: make_memory_pipeline(**case), points, num_epochs=epochs, level=level
    )
    n = case["num_records"] // case["shard_count"] if case["shard_count"] > 1 else case["num_records"]
    if case["drop_remainder"]:
        n -= n % case["batch_size"]
    assert report.num_records == n * epochs


@FAST
@given(memory_cases())
def test_memory_source_resumes_exactly(case):
    _run_memory(case)


@pytest.mark.slow
@SLOW
@given(memory_cases())
def test_memory_source_resumes_exactly_big(case):
    _run_memory(case)


@st.composite
def stream_cases(draw):
    n = draw(st.integers(0, 12))
    bs = draw(BATCH)
    epochs = draw(st.integers(1, 3))
    return dict(
        n=n,
        bs=bs,
        stochastic=draw(st.booleans()),
        drop=draw(st.booleans()),
        epochs=epochs,
        level=draw(st.sampled_from(["pipeline", "iterator"])),
        points=_points(draw, max(n, 1), bs, epochs),
        shard=draw(st.sampled_from([(0, 1), (0, 1), (0, 2), (1, 2), (2, 3)])),
    )


def _make_stream(n: int, bs: int, stochastic: bool, drop: bool,
                 shard: tuple[int, int] = (0, 1)) -> Pipeline:
    return Pipeline(
        source=CountingStream(CountingStreamConfig(num_records=n, seed=5)),
        stages=stages(stochastic),
        batch_size=bs,
        rngs=nnx.Rngs(0),
        drop_remainder=drop,
        shard_index=shard[0],
        shard_count=shard[1],
    )


@FAST
@given(stream_cases())
def test_forward_only_stream_resumes_exactly(case):
    args = (case["n"], case["bs"], case["stochastic"], case["drop"], case["shard"])
    index, count = case["shard"]
    share = case["n"] // count  # every count-th record, in whole rounds of count
    if case["drop"] and 0 < share < case["bs"]:
        # every batch would be dropped: refused at the first pass's end, as the memory
        # source is at construction
        with pytest.raises(ConfigError, match="would serve no batch"):
            list(_make_stream(*args))
        return
    report = check_resume_exact(
        lambda: _make_stream(*args), case["points"], num_epochs=case["epochs"], level=case["level"]
    )
    per_epoch = share - (share % case["bs"] if case["drop"] else 0)
    assert report.num_records == per_epoch * case["epochs"]


@FAST
@given(
    n=SIZES,
    bs=BATCH,
    epochs=st.integers(1, 2),
    stochastic=st.booleans(),
    data=st.data(),
)
def test_custom_indexed_csv_source_resumes_exactly(tmp_path, n, bs, epochs, stochastic, data):
    path = write_csv(tmp_path / f"rows{n}.csv", n)
    points = data.draw(st.lists(st.integers(0, math.ceil(n / bs) * epochs), max_size=3))

    def make():
        return Pipeline(
            source=CSVDataSource(CSVDataSourceConfig(file_path=path)),
            stages=stages(stochastic),
            batch_size=bs,
            rngs=nnx.Rngs(0),
            shard_index=0,
            shard_count=1,
        )

    report = check_resume_exact(make, points, num_epochs=epochs)
    assert report.num_records == n * epochs


# ------------------------------------------------------------ fixed, named cases
def test_interrupt_at_every_batch_in_a_row():
    """Save/restore after every single batch, and twice at each point."""
    make = lambda: make_memory_pipeline(11, 3, shuffle=True, stochastic=True)  # noqa: E731
    points = [p for p in range(0, 13) for _ in range(2)]
    report = check_resume_exact(make, points, num_epochs=3)
    assert report.batches_per_epoch == (4, 4, 4)
    assert report.max_state_bytes < 1024


def test_interrupt_on_epoch_boundary_continues_next_epoch():
    make = lambda: make_memory_pipeline(6, 3, shuffle=True, stochastic=True)  # noqa: E731
    report = check_resume_exact(make, [2, 4], num_epochs=3, level="iterator")
    assert report.batches_per_epoch == (2, 2, 2)


def test_epochs_differ_and_augmentation_is_per_record():
    """The property the resume check relies on: order and draws change per epoch."""
    out = collect(make_memory_pipeline(8, 4, shuffle=True, stochastic=True), 2)
    x0 = np.concatenate([b["x"] for e, b in out if e == 0])
    x1 = np.concatenate([b["x"] for e, b in out if e == 1])
    assert sorted(x0.tolist()) == sorted(x1.tolist()) == [2 * i for i in range(8)]
    assert x0.tolist() != x1.tolist()
    # Same record at another batch size gets the same draw.
    other = collect(make_memory_pipeline(8, 3, shuffle=True, stochastic=True), 1)
    noise_a = {int(x): n.tolist() for b in [b for _, b in out[:2]] for x, n in zip(b["x"], b["noise"])}
    noise_b = {int(x): n.tolist() for _, b in other for x, n in zip(b["x"], b["noise"])}
    assert noise_a == noise_b


def test_check_resume_exact_catches_a_broken_resume():
    """The checker is not vacuous: a pipeline that restarts its epoch is caught."""

    class Forgetful(Pipeline):
        def set_state(self, state):  # drops the position on the floor
            state = dict(state, position=0, source=dict(state["source"], current_index=0))
            super().set_state(state)

    def make():
        p = make_memory_pipeline(9, 2)
        return Forgetful(source=p.source, stages=[], batch_size=2, rngs=nnx.Rngs(0), shard_index=0, shard_count=1)

    with pytest.raises(AssertionError, match="batch 2 \\(epoch 0\\)"):
        check_resume_exact(make, [2])


def test_check_resume_exact_refuses_non_json_state():
    class Tuply(Pipeline):
        def get_state(self):
            return dict(super().get_state(), extra=(1, 2))

    def make():
        p = make_memory_pipeline(4, 2)
        return Tuply(source=p.source, stages=[], batch_size=2, rngs=nnx.Rngs(0), shard_index=0, shard_count=1)

    with pytest.raises(AssertionError, match="changes when written to JSON"):
        check_resume_exact(make, [1])


def test_stream_restored_into_a_later_epoch_reads_that_epoch():
    """Restoring a stream opens the saved pass (restart) before skipping in it."""
    # pass e serves 100 * e + i, opened by restart(epoch)
    make = lambda: Pipeline(source=NumberStream(0, 6, epoch_step=100), stages=[],  # noqa: E731
                            batch_size=4, rngs=nnx.Rngs(0), shard_index=0, shard_count=1)
    check_resume_exact(make, [3], num_epochs=2)


# ------------------------------------------------ direct iteration of a source
@FAST
@given(n=st.integers(1, 9), shuffle=st.booleans(), epochs=st.integers(1, 3), data=st.data())
def test_memory_source_direct_iteration_resumes_exactly(n, shuffle, epochs, data):
    from datarax.sources import MemorySource, MemorySourceConfig
    from datarax.testing import check_source_resume_exact
    from reliability_sources import memory_data

    points = data.draw(st.lists(st.integers(0, n * epochs), max_size=4))
    make = lambda: MemorySource(  # noqa: E731
        MemorySourceConfig(shuffle=shuffle, seed=3, num_epochs=epochs, track_metadata=shuffle),
        memory_data(n, as_list=False),
    )
    assert check_source_resume_exact(make, points) == n * epochs


def test_stream_direct_iteration_resumes_exactly():
    from datarax.testing import check_source_resume_exact

    make = lambda: CountingStream(CountingStreamConfig(num_records=7, seed=2))  # noqa: E731
    assert check_source_resume_exact(make, [0, 3, 3, 6]) == 7


# ------------------------------------------------ host-path contract details
def test_forward_only_stream_shards_are_disjoint():
    """Streams keep every count-th record of the pass: disjoint shares covering it."""
    seen = []
    for index in range(2):
        p = Pipeline(source=CountingStream(CountingStreamConfig(num_records=10)), stages=[],
                     batch_size=3, rngs=nnx.Rngs(0), shard_index=index, shard_count=2)
        seen.append([int(i) for _, b in collect(p, 1) for i in b["id"]])
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(10))


def test_short_batch_mid_stream_does_not_end_the_epoch():
    """A stream may return short batches mid-pass; Pipeline joins them (drop_remainder too)."""
    import jax
    import numpy as np

    from datarax.core.data_source import DataSourceModule
    from reliability_sources import CountingStreamConfig

    class TwoFiles(DataSourceModule):
        """Records 0..9 in two files of 5; a batch never crosses a file."""

        def __init__(self) -> None:
            super().__init__(CountingStreamConfig())
            self._i = 0

        def restart(self, epoch: int) -> None:
            self._i = 0

        def get_batch(self, batch_size: int):
            if self._i >= 10:
                return None
            end = min(self._i + batch_size, (self._i // 5 + 1) * 5)
            out = {"x": np.arange(self._i, end, dtype=np.int32)}
            self._i = end
            return out

        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.int32)}

    def make():
        return Pipeline(source=TwoFiles(), stages=[], batch_size=4, drop_remainder=True,
                        shard_index=0, shard_count=1)

    ids = [int(i) for _, b in collect(make(), 1) for i in b["x"]]
    assert ids == list(range(8))  # short file-boundary batches are joined, none lost
    check_resume_exact(make, [1, 1, 2], num_epochs=2)


def test_pipeline_asks_nothing_more_of_a_pass_after_none():
    """``None`` from get_batch ends the pass: a stream that would start over on the next
    call (a lazily re-opened generator) still gives exactly one pass per iter(pipeline)."""
    import itertools

    import jax
    import numpy as np

    from datarax.core.data_source import DataSourceModule
    from reliability_sources import CountingStreamConfig

    class Restarting(DataSourceModule):
        def __init__(self) -> None:
            super().__init__(CountingStreamConfig())
            self._rows = None

        def get_batch(self, batch_size: int):
            if self._rows is None:
                self._rows = iter(range(7))
            rows = list(itertools.islice(self._rows, batch_size))
            if not rows:
                self._rows = None  # the next call starts a new pass
                return None
            return {"x": np.asarray(rows, np.int32)}

        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.int32)}

    p = Pipeline(source=Restarting(), stages=[], batch_size=3, shard_index=0, shard_count=1)
    for _ in range(2):
        batches = list(itertools.islice(iter(p), 20))  # bounded: a bug must not hang
        assert [b["x"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
