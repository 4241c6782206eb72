"""len(pipeline) and len(iterator) (issue 10, item 7): batches in an epoch and batches
left, so tqdm and LR schedules work; unknown for a stream; drop_remainder=True with a
batch larger than the epoch is refused rather than serving an empty epoch."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def memory(n=10):
    return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})


@pytest.mark.parametrize("drop, batches", [(False, 3), (True, 2)])
def test_len_counts_batches_of_an_epoch_and_those_left(drop, batches):
    pipeline = Pipeline(source=memory(10), stages=[], batch_size=4, drop_remainder=drop,
                        rngs=nnx.Rngs(0))
    assert len(pipeline) == batches
    iterator = iter(pipeline)
    left = [len(iterator)]
    for _ in iterator:
        left.append(len(iterator))
    assert left == list(range(batches, -1, -1))
    assert len(pipeline) == batches  # every epoch the same
    assert sum(1 for _ in pipeline) == batches


def test_len_of_a_shard_and_of_a_host_source(tmp_path):
    sharded = Pipeline(source=memory(10), stages=[], batch_size=2, shard_index=1, shard_count=3)
    assert len(sharded) == 2 and sum(1 for _ in sharded) == 2  # 3 records of 10 // 3
    np.save(tmp_path / "x.npy", np.arange(7, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy")))
    host = Pipeline(source=source, stages=[], batch_size=3)
    iterator = iter(host)
    next(iterator)
    assert (len(host), len(iterator)) == (3, 2)
    iterator.close()
    source.close()


def test_len_of_a_stream_is_unknown():
    from datarax.core.data_source import DataSourceModule

    class Stream(DataSourceModule):
        def get_batch(self, batch_size):
            return None

        def element_spec(self):
            import jax

            return {"x": jax.ShapeDtypeStruct((), np.int32)}

    from datarax.core.config import StructuralConfig

    pipeline = Pipeline(source=Stream(StructuralConfig()), stages=[], batch_size=2)
    with pytest.raises(TypeError) as err:
        len(pipeline)
    assert str(err.value) == (
        "len(Pipeline) is unknown: Stream has no length: it is a stream, read forward only; "
        "len() does not read a pass to count its records (count them as you iterate)."
    )
    with pytest.raises(TypeError) as err:
        len(iter(pipeline))
    assert str(err.value) == (
        "len() of this iterator is unknown: Stream has no length: it is a stream, read "
        "forward only; len() does not read a pass to count its records (count them as you "
        "iterate)."
    )


def test_drop_remainder_with_a_batch_larger_than_the_epoch_is_refused():
    with pytest.raises(ConfigError) as err:
        Pipeline(source=memory(5), stages=[], batch_size=8, drop_remainder=True)
    assert str(err.value) == (
        "Pipeline batch_size=8 with drop_remainder=True would serve no batch: an epoch of "
        "MemorySource holds 5 records. Lower batch_size or set drop_remainder=False."
    )
    with pytest.raises(ConfigError) as err:
        Pipeline(source=memory(1), stages=[], batch_size=2, drop_remainder=True)
    assert "an epoch of MemorySource holds 1 record. Lower batch_size" in str(err.value)
    with pytest.raises(ConfigError) as err:
        Pipeline(source=memory(10), stages=[], batch_size=4, drop_remainder=True,
                 shard_index=0, shard_count=4)
    assert str(err.value) == (
        "Pipeline batch_size=4 with drop_remainder=True would serve no batch: an epoch of "
        "MemorySource holds 2 records in this shard. Lower batch_size or set "
        "drop_remainder=False."
    )
    # without drop_remainder the short epoch is one batch
    assert [len(b["x"]) for b in Pipeline(source=memory(5), stages=[], batch_size=8)] == [5]


def stream(n):
    """A built-in stream of ``n`` records whose length is unknown until its pass ends."""
    from datarax.sources import FlatMapSource

    parent = MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})
    return FlatMapSource(parent, lambda record: [record], max_outputs=1)


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_stream_shorter_than_a_batch_with_drop_remainder_is_refused_at_its_pass_end(prefetch):
    """A stream's length is unknown when the pipeline is built: its first pass, shorter
    than one batch, ends in the refusal an in-memory source gets when built."""
    pipeline = Pipeline(source=stream(3), stages=[], batch_size=4, drop_remainder=True,
                        prefetch=prefetch)
    with pytest.raises(ConfigError) as err:
        list(pipeline)
    assert str(err.value) == (
        "Pipeline batch_size=4 with drop_remainder=True would serve no batch: an epoch of "
        "FlatMapSource holds 3 records. Lower batch_size or set drop_remainder=False."
    )
    # a longer stream drops only its short last batch, epoch after epoch
    pipeline = Pipeline(source=stream(5), stages=[], batch_size=4, drop_remainder=True,
                        prefetch=prefetch)
    assert [[b["x"].tolist() for b in pipeline] for _ in range(2)] == [[[0, 1, 2, 3]]] * 2


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_pass_whose_skipped_bad_records_leave_less_than_a_batch_names_them(prefetch):
    """6 records, 3 of them bad and skipped: the 3 left are fewer than a batch, so
    drop_remainder=True would serve nothing; the refusal counts what was left, not the
    6 positions (it said 'holds 6 records' to a batch of 5)."""
    from bad_rows import Rows, RowsConfig

    pipeline = Pipeline(source=Rows(RowsConfig(on_error="skip"), 6, bad=(1, 2, 4)), stages=[],
                        batch_size=5, drop_remainder=True, prefetch=prefetch)
    with pytest.raises(ConfigError) as err:
        list(pipeline)
    assert str(err.value) == (
        "Pipeline batch_size=5 with drop_remainder=True would serve no batch: an epoch of "
        "Rows holds 3 records (3 more skipped as bad). Lower batch_size or set "
        "drop_remainder=False."
    )
    assert [b["x"].tolist() for b in Pipeline(
        source=Rows(RowsConfig(on_error="skip"), 6, bad=(1, 2, 4)), stages=[], batch_size=2,
        drop_remainder=True)] == [[0.0, 3.0]]
