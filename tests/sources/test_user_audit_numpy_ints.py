"""NumPy integers where the API takes an int.

Batch sizes, shard counts and seeds are often computed with NumPy
(``global_batch // n``, ``np.random.default_rng().integers(...)``); a NumPy integer is
an integer and is taken as the same Python int, in configs and in the Pipeline; a NumPy
bool is taken as the same Python bool; a saved state holding NumPy ints (a checkpoint kept
in NumPy) restores as one of Python ints does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from datarax.core.errors import ConfigError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, MemorySource, MemorySourceConfig
from source_reads import with_numpy_ints


def test_pipeline_takes_numpy_ints_for_batch_size_prefetch_and_shards():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    pipeline = Pipeline(source=source, stages=[], batch_size=np.int64(3), prefetch=np.int32(1),
                        shard_index=np.int64(1), shard_count=np.int64(2))
    assert type(pipeline.batch_size) is int and len(pipeline) == 2
    assert [b["x"].tolist() for b in pipeline] == [[5, 6, 7], [8, 9]]
    json.dumps(pipeline.get_state())  # the state stays JSON-able


def test_configs_take_numpy_ints_as_python_ints():
    config = MemorySourceConfig(shuffle=True, seed=np.uint32(7), num_epochs=np.int64(2))
    assert config == MemorySourceConfig(shuffle=True, seed=7, num_epochs=2)
    assert type(config.seed) is int and type(config.num_epochs) is int
    assert type(ArrayRecordSourceConfig(seed=np.int64(5)).seed) is int


@pytest.mark.parametrize("value", [2.0, True, "3", np.float32(2)])
def test_non_integers_are_still_refused(value):
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(ConfigError, match="batch_size must be an int >= 1"):
        Pipeline(source=source, stages=[], batch_size=value)
    with pytest.raises(ConfigError, match="seed must be an int"):
        MemorySourceConfig(seed=value)


def test_configs_take_numpy_bools_as_python_bools():
    # a switch computed with NumPy (``flags["shuffle"]`` of an np.load, ``rng.random() < p``)
    config = MemorySourceConfig(shuffle=np.True_, seed=3)
    assert config == MemorySourceConfig(shuffle=True, seed=3) and type(config.shuffle) is bool
    data = {"x": np.arange(8, dtype=np.int32)}
    orders = [[int(e["x"]) for e in MemorySource(c, data)]
              for c in (config, MemorySourceConfig(shuffle=True, seed=3))]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(8))
    json.dumps(MemorySource(config, data).get_state())  # the state stays JSON-able
    assert ArrayRecordSourceConfig(shuffle_files=np.bool_(False)).shuffle_files is False
    with pytest.raises(ConfigError, match="shuffle must be a bool"):
        MemorySourceConfig(shuffle=np.int64(1))


def test_pipeline_takes_numpy_bools_for_its_switches():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    pipeline = Pipeline(source=source, stages=[], batch_size=4, drop_remainder=np.True_,
                        check_finite=np.False_)
    assert pipeline.drop_remainder is True and len(pipeline) == 2
    assert [b["x"].tolist() for b in pipeline] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    state = json.loads(json.dumps(pipeline.get_state()))  # the state stays JSON-able
    assert state["settings"]["drop_remainder"] is True
    padded = Pipeline(source=MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)}),
                      stages=[], batch_size=4, pad_remainder=np.bool_(True))
    assert [b["valid"].tolist() for b in padded] == [[True] * 4, [True, False, False, False]]
    with pytest.raises(ConfigError, match="drop_remainder must be a bool"):
        Pipeline(source=source, stages=[], batch_size=4, drop_remainder=np.int64(1))


def test_states_holding_numpy_ints_restore_like_python_ints(tmp_path):
    pytest.importorskip("array_record")
    from int_record_files import int_source, write_int_parts

    paths = write_int_parts(tmp_path, [6, 13])

    def build():
        source = int_source(paths, shuffle_files=True, seed=3, on_error="skip")
        return Pipeline(source=source, stages=[], batch_size=4)

    first = build()
    iterator = iter(first)
    next(iterator)
    state, source_state = iterator.get_state(), first.source.get_state()
    rest = [b["x"].tolist() for b in iterator]
    for restore in ("pipeline", "source"):
        again = build()
        if restore == "pipeline":
            again.set_state(with_numpy_ints(state))
        else:
            again.source.set_state(with_numpy_ints(source_state))
        assert [b["x"].tolist() for b in again] == rest
        json.dumps(again.get_state())  # what it saves next is plain JSON again
        again.source.close()
    first.source.close()


def test_host_sources_take_numpy_ints_for_their_reader_options(tmp_path):
    # ``num_threads=np.int64(os.cpu_count() // 2)``: a reader option computed with NumPy
    pytest.importorskip("array_record")
    from int_record_files import int_source, write_int_parts

    paths = write_int_parts(tmp_path, [5, 9])
    source = int_source(paths, num_threads=np.int64(2), read_ahead=np.int32(3),
                        decode_processes=np.int64(0))
    pipeline = Pipeline(source=source, stages=[], batch_size=4)
    assert [b["x"].tolist() for b in pipeline] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    json.dumps(pipeline.get_state())  # the state stays JSON-able
    source.close()
    for bad in (np.float64(2), np.int64(0), True):
        with pytest.raises(ConfigError, match="num_threads must be an int >= 1, got"):
            int_source(paths, num_threads=bad)


def test_skip_budgets_and_mixture_lengths_take_numpy_numbers():
    config = ArrayRecordSourceConfig(on_error="skip", max_skipped=np.int64(2),
                                     max_skipped_fraction=np.float32(0.5))
    assert (config.max_skipped, type(config.max_skipped)) == (2, int)
    assert type(config.max_skipped_fraction) is float
    assert config.error_policy().budget(10) == 2
    with pytest.raises(ConfigError, match="max_skipped must be an int >= 0 or None, got np.float"):
        ArrayRecordSourceConfig(on_error="skip", max_skipped=np.float64(2))
    from datarax.sources import MixSource, MixSourceConfig

    a = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    b = MemorySource(MemorySourceConfig(), {"x": np.arange(100, 102, dtype=np.int32)})
    config = MixSourceConfig(names=("a", "b"), weights=(1.0, 1.0), records_per_epoch=np.int64(4))
    assert type(config.records_per_epoch) is int
    assert len(MixSource({"a": a, "b": b}, {"a": 1, "b": 1}, records_per_epoch=np.int64(4))) == 4


def test_a_numpy_shuffle_block_is_a_setting_a_state_checks(tmp_path):
    # shuffle_block=np.int64(...) stayed a NumPy int, which the settings a state must match
    # left out: its states restored into a source of another block size, and were refused
    # by one built with the same size as a Python int ("saved with shuffle_block=None")
    pytest.importorskip("array_record")
    from int_record_files import int_source, write_int_parts

    paths = write_int_parts(tmp_path, [6, 13, 20])
    config = ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=2,
                                     shuffle_block=np.int64(1 << 16))
    assert (config.shuffle_block, type(config.shuffle_block)) == (1 << 16, int)

    def build(block):
        source = int_source(paths, shuffle_files=True, shuffle_window=2, shuffle_block=block)
        return Pipeline(source=source, stages=[], batch_size=4)

    first = build(np.int64(1 << 16))
    iterator = iter(first)
    next(iterator)
    state = json.loads(json.dumps(first.get_state()))
    assert state["settings"]["source.shuffle_block"] == 1 << 16
    rest = [b["x"].tolist() for b in iterator]
    same = build(1 << 16)
    same.set_state(state)
    assert [b["x"].tolist() for b in same] == rest
    other = build(1 << 17)
    with pytest.raises(StateError, match=r"shuffle_block=65536 but this pipeline has "
                                         r"source.shuffle_block=131072"):
        other.set_state(state)
    for pipeline in (first, same, other):
        pipeline.source.close()


def test_a_numpy_value_in_a_config_of_ones_own_is_among_its_settings():
    # a custom config (the seed page's CSVDataSourceConfig pattern) need not convert its
    # fields; a NumPy value was left out of the settings a state must match
    from dataclasses import dataclass

    from datarax.core.config import StructuralConfig, config_settings

    @dataclass(frozen=True)
    class RowsConfig(StructuralConfig):
        shuffle: bool = False
        seed: int = 0
        scale: float = 1.0

    settings = config_settings(RowsConfig(shuffle=np.True_, seed=np.int64(3),
                                          scale=np.float32(0.5)))
    assert settings == {"shuffle": True, "seed": 3, "scale": 0.5}
    assert [type(v) for v in settings.values()] == [bool, int, float]
