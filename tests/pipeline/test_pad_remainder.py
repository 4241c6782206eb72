"""Pipeline(pad_remainder=True): one shape for every batch, a "valid" field, each record
counted once — indexed and host sources, with a filter, on every shard."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import ConfigError, StateError
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def memory(n):
    return MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})


def test_last_batch_padded_with_valid_rows_counted_once(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(10, dtype=np.int32))
    for source, field in ((memory(10), "x"),
                          (NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"))), "data")):
        p = Pipeline(source, batch_size=4, pad_remainder=True)
        batches = list(p)
        assert [b[field].shape for b in batches] == [(4,)] * 3
        assert np.asarray(batches[-1]["valid"]).tolist() == [True, True, False, False]
        counted = np.concatenate([np.asarray(b[field])[np.asarray(b["valid"])] for b in batches])
        assert counted.tolist() == list(range(10))
        assert p.element_spec()["valid"].dtype == np.bool_


def shard_pipelines(make, count, batch_size):
    return [Pipeline(make(), batch_size=batch_size, pad_remainder=True, shard_index=i,
                     shard_count=count) for i in range(count)]


def valid_records(batch, field):
    return np.asarray(batch[field])[np.asarray(batch["valid"])].tolist()


@pytest.mark.parametrize("n,count,size", [
    (9, 4, 2),  # a shard of padding only, a short last batch
    pytest.param(10, 3, 2, marks=pytest.mark.slow),
    pytest.param(10, 4, 3, marks=pytest.mark.slow),
    pytest.param(2, 4, 1, marks=pytest.mark.slow),
])
def test_shards_count_each_record_once_in_equal_batches(tmp_path, n, count, size):
    from datarax.sources import ConcatSource

    np.save(tmp_path / "x.npy", np.arange(n, dtype=np.int32))
    np.save(tmp_path / "head.npy", np.arange(n // 2, dtype=np.int32))
    makers = [
        ("x", lambda: MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                                   {"x": np.arange(n, dtype=np.int32)})),
        ("data", lambda: NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"),
                                                   shuffle=True, seed=3))),
        ("data", lambda: ConcatSource([  # a host concatenation
            NpySource(NpySourceConfig(paths=str(tmp_path / "head.npy"))),
            MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                         {"data": np.arange(n // 2, n, dtype=np.int32)})])),
    ]
    for field, make in makers:
        pipelines = shard_pipelines(make, count, size)
        shards = [list(p) for p in pipelines]
        counts = {len(batches) for batches in shards}
        assert counts == {len(pipelines[0])}  # same number of batches on every shard
        assert {np.asarray(b[field]).shape for bs in shards for b in bs} == {(size,)}
        seen = [r for batches in shards for b in batches for r in valid_records(b, field)]
        assert sorted(seen) == list(range(n)), (field, seen)
        for p, batches in zip(pipelines, shards):  # stats count the valid records only
            assert p.stats()["records"] == sum(len(valid_records(b, field)) for b in batches)



def test_a_shares_slots_past_the_epoch_repeat_its_last_record(tmp_path):
    # padding rows repeat the last record before them, on every shard (they held
    # record 0 where a share's last batch ran past the epoch's end)
    np.save(tmp_path / "x.npy", np.arange(7, dtype=np.int32))
    path = str(tmp_path / "x.npy")
    for field, make in (("x", lambda: memory(7)),
                        ("data", lambda: NpySource(NpySourceConfig(paths=path)))):
        last = [list(p)[-1] for p in shard_pipelines(make, 2, 2)]
        assert [(np.asarray(b[field]).tolist(), np.asarray(b["valid"]).tolist())
                for b in last] == [([2, 3], [True, True]), ([6, 6], [True, False])]

def test_padded_shard_resumes_exactly_and_refuses_another_process_count():
    def make(index, count=4):
        source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
        return Pipeline(source, batch_size=1, pad_remainder=True, shard_index=index,
                        shard_count=count)

    whole = [(valid_records(b, "x"), np.asarray(b["x"]).tolist()) for b in make(3)]
    assert [v for v, _ in whole] == [[9], [], []]
    p = make(3)
    it = iter(p)
    next(it)
    state = p.get_state()
    again = make(3)
    again.set_state(state)
    rest = [(valid_records(b, "x"), np.asarray(b["x"]).tolist()) for b in again]
    assert rest == whole[1:]
    with pytest.raises(StateError, match="pad_remainder"):
        make(0, count=2).set_state(state)


def test_padded_shards_refuse_streams_and_filters():
    class Stream(DataSourceModule):
        def __init__(self):
            super().__init__(StructuralConfig())

        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.int32)}

        def get_batch(self, batch_size):
            return None

    with pytest.raises(ConfigError, match="stream"):
        Pipeline(Stream(), batch_size=2, pad_remainder=True, shard_index=0, shard_count=2)
    keep = FilterOperator(predicate=lambda el: el.data["x"] > 0)
    with pytest.raises(ConfigError, match="FilterOperator"):
        Pipeline(memory(10), stages=[keep], batch_size=2, pad_remainder=True, shard_index=0,
                 shard_count=2)


def test_with_a_filter_and_refused_combinations():
    keep = FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)
    p = Pipeline(memory(10), stages=[keep], batch_size=4, pad_remainder=True)
    last = list(p)[-1]
    assert np.asarray(last["x"]).tolist() == [8, 8, 8, 8]
    assert np.asarray(last["valid"]).tolist() == [True, False, False, False]
    with pytest.raises(ConfigError, match="drop_remainder"):
        Pipeline(memory(10), batch_size=4, pad_remainder=True, drop_remainder=True)


@pytest.mark.parametrize("concat", [False, True])
def test_padded_shards_over_a_source_that_skips_bad_records_are_refused(tmp_path, concat):
    """A shard that skips a bad record serves fewer batches than the others, so
    pad_remainder could not keep the processes' batch counts equal: refused, naming the
    setting (a concatenation's part too)."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule, ConcatSource

    from int_record_files import write_int_parts

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip"),
                                     paths=write_int_parts(tmp_path, [8]),
                                     decode=lambda r: {"x": np.frombuffer(r, np.int32)[0]})
    name = "on_error"
    if concat:
        source = ConcatSource([source, MemorySource(MemorySourceConfig(),
                                                    {"x": np.arange(4, dtype=np.int32)})])
        name = "parts[0].on_error"
    with pytest.raises(ConfigError, match=rf"shard_count=2 over \w+ with {re.escape(name)}='skip'"):
        Pipeline(source=source, stages=[], batch_size=2, pad_remainder=True, shard_index=1,
                 shard_count=2)
    # one process pads as before
    pipeline = Pipeline(source=source, stages=[], batch_size=3, pad_remainder=True)
    assert sum(int(np.asarray(b["valid"]).sum()) for b in pipeline) == len(source)


def test_padded_state_mismatch_names_the_side_with_pad_remainder():
    def make(index, count, pad):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=5),
                              {"x": np.arange(11, dtype=np.int32)})
        return Pipeline(source, batch_size=2, pad_remainder=pad, shard_index=index,
                        shard_count=count)

    padded, plain = make(0, 3, True), make(0, 3, False)
    next(iter(padded)), next(iter(plain))
    padded_state, plain_state = padded.get_state(), plain.get_state()
    with pytest.raises(StateError, match=re.escape(
            "saved by 3 processes with pad_remainder=True (shares rounded up to whole "
            "padding slots), which restores only on 3 processes; this pipeline runs as "
            "shard 0 of 1. Restore it on 3 processes with pad_remainder=True.")):
        make(0, 1, True).set_state(padded_state)
    with pytest.raises(StateError, match=re.escape(
            "saved by 3 processes and this pipeline runs as shard 0 of 2 with "
            "pad_remainder=True (shares rounded up to whole padding slots), which takes only "
            "a state saved on 2 processes with pad_remainder=True. Restore it without "
            "pad_remainder")):
        make(0, 2, True).set_state(plain_state)
    with pytest.raises(StateError, match=r"padded_shards=True but this pipeline has "
                       r"padded_shards=None \(True: built with pad_remainder=True over several "
                       r"processes"):
        make(1, 3, False).set_state(padded_state)


def test_a_padded_batch_past_int32_rows_is_refused_when_built():
    with pytest.raises(ConfigError) as err:
        Pipeline(memory(7), batch_size=2**31, pad_remainder=True)
    assert str(err.value) == (
        "Pipeline pad_remainder=True pads each epoch's last batch to batch_size=2147483648 "
        "rows, more than 2**31 - 1: no batch of that many rows can be made. Give the batch "
        "size the model takes (padding fills it up to that), or pad_remainder=False for one "
        "unpadded batch of the whole epoch.")
    whole = Pipeline(memory(7), batch_size=2**31)  # unpadded: one batch of the epoch
    assert [b["x"].tolist() for b in whole] == [list(range(7))]
