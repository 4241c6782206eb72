"""Promises of the data-sources guide's prose that its examples do not run.

"All data sources inherit from DataSourceModule, an NNX module that implements the
iterator protocol"; "MemorySource accepts a dict of arrays or a list/sequence of
elements"; metadata carries "index, source info" (and keeps them through a restore);
"Any mutable state is managed appropriately for checkpointing" (nnx.state restored in a
fresh process); a custom source that skips ``super().__init__(config, ...)`` (rule 2)
is told so by whichever method it calls first.
"""

from __future__ import annotations

import collections.abc as abc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import datarax.sources as sources
from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import DataraxError, SourceContractError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

ROOT = Path(__file__).resolve().parents[1]

SOURCE_CLASSES = ["MemorySource", "TFDSEagerSource", "TFDSStreamingSource", "HFEagerSource",
                  "HFStreamingSource", "ArrayRecordSourceModule", "ConcatSource", "MixSource",
                  "InterleaveSource", "ShuffleBufferSource", "FlatMapSource", "NpySource"]


@pytest.mark.parametrize("name", SOURCE_CLASSES)
def test_every_built_in_source_is_an_nnx_data_source_module_and_an_iterator(name):
    cls = getattr(sources, name)
    assert issubclass(cls, DataSourceModule) and issubclass(cls, nnx.Module)
    assert issubclass(cls, abc.Iterator)  # __iter__ and __next__


def test_a_source_is_its_own_iterator_and_next_needs_no_iter_first():
    source = MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)])
    assert iter(source) is source
    assert int(next(source)["x"]) == 0  # next() straight away reads record 0
    assert [int(e["x"]) for e in source] == [1, 2, 3, 4]  # iter() goes on from there
    with pytest.raises(StopIteration):
        next(source)
    assert [int(e["x"]) for e in source] == [0, 1, 2, 3, 4]  # a finished source restarts


class RecordSequence(abc.Sequence):
    """A sequence of records that is neither a list nor a tuple."""

    def __len__(self) -> int:
        return 7

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(7))]
        if not -7 <= i < 7:
            raise IndexError(i)
        return {"x": i % 7, "y": np.full((2,), i % 7, np.float32)}


@pytest.mark.parametrize("make", [list, tuple, lambda rs: RecordSequence()],
                         ids=["list", "tuple", "abc.Sequence"])
def test_memory_source_takes_any_sequence_of_records(make):
    records = [{"x": i, "y": np.full((2,), i, np.float32)} for i in range(7)]
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), make(records)), stages=[],
                        batch_size=3)
    batches = list(pipeline)
    assert [np.asarray(b["x"]).tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    np.testing.assert_array_equal(np.concatenate([np.asarray(b["y"]) for b in batches]),
                                  np.repeat(np.arange(7, dtype=np.float32), 2).reshape(7, 2))


class ByIndex:
    """Records read by index (as a PyTorch Dataset is), not a collections.abc.Sequence."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i):
        return {"x": i}


@pytest.mark.parametrize("data, hint", [
    (ByIndex(), "got ByIndex (read by index, but not a list, tuple or "
                "collections.abc.Sequence); pass [data[i] for i in range(len(data))]."),
    ({"a": {"x": 1}}.values(), "got dict_values; pass list(data) (a sequence: a list or "
                               "tuple of records)."),
])
def test_data_that_is_not_a_sequence_is_named_with_what_to_pass(data, hint):
    with pytest.raises(DataraxError) as err:
        MemorySource(MemorySourceConfig(), data)
    assert str(err.value) == ("MemorySource data must be a dict of arrays or a sequence of "
                              "records, " + hint)
    listed = [data[i] for i in range(len(data))] if isinstance(data, ByIndex) else list(data)
    assert len(MemorySource(MemorySourceConfig(), listed)) == len(data)  # the fix works


def _tracked() -> MemorySource:
    config = MemorySourceConfig(shuffle=True, seed=2, num_epochs=2, track_metadata=True)
    return MemorySource(config, {"x": np.arange(5, dtype=np.int32) * 10}, name="train")


def _seen(elements) -> list[tuple[int, int, int, str]]:
    return [(int(e.data["x"]), e.metadata.index, e.metadata.epoch, e.metadata.source)
            for e in elements]


def test_metadata_keeps_each_records_stable_index_and_epoch_through_a_restore():
    whole = _seen(_tracked())
    assert [x // 10 for x, index, _, _ in whole] == [index for _, index, _, _ in whole]
    assert [epoch for _, _, epoch, _ in whole] == [0] * 5 + [1] * 5
    assert {source for *_, source in whole} == {"train"}  # the source's name
    first, second = [x for x, *_ in whole[:5]], [x for x, *_ in whole[5:]]
    assert first != sorted(first) and second != first and sorted(second) == sorted(first)
    for cut in (3, 5, 7):  # mid-epoch, at the epoch's end, in the second epoch
        source = _tracked()
        iterator = iter(source)
        head = _seen(next(iterator) for _ in range(cut))
        fresh = _tracked()
        fresh.set_state(source.get_state())
        assert head + _seen(fresh) == whole, cut


RESTORE_IN_A_FRESH_PROCESS = """
import pickle, sys
import numpy as np
from flax import nnx
from datarax.sources import MemorySource, MemorySourceConfig
source = MemorySource(MemorySourceConfig(shuffle=True, seed=5, num_epochs=2),
                      [{"x": i} for i in range(6)])
with open(sys.argv[1], "rb") as f:
    nnx.update(source, pickle.load(f))
print(" ".join(str(int(e["x"])) for e in source))
"""


def test_nnx_state_of_a_shuffled_source_restores_in_a_fresh_process(tmp_path):
    def build():
        return MemorySource(MemorySourceConfig(shuffle=True, seed=5, num_epochs=2),
                            [{"x": i} for i in range(6)])

    whole = [int(e["x"]) for e in build()]
    source = build()
    iterator = iter(source)
    head = [int(next(iterator)["x"]) for _ in range(8)]  # into the second epoch
    saved = tmp_path / "state.pkl"
    saved.write_bytes(pickle.dumps(nnx.state(source)))
    result = subprocess.run(
        [sys.executable, "-c", RESTORE_IN_A_FRESH_PROCESS, str(saved)], capture_output=True,
        text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert head + [int(v) for v in result.stdout.split()] == whole


class SkipsBaseInit(DataSourceModule):
    """Rule 2 broken: ``super().__init__(config, ...)`` is never called."""

    def __init__(self, config: StructuralConfig) -> None:
        self.rows = nnx.data(jnp.arange(4))

    def __len__(self) -> int:
        return 4

    def get_batch_at(self, start, size, key=None):
        return {"x": self.rows[(jnp.arange(size) + start) % 4]}


NO_BASE_INIT = ("SkipsBaseInit was built without DataSourceModule.__init__, which gives a "
                "source its position: call super().__init__(config, rngs=rngs, name=name) "
                "first in its __init__.")


def test_a_source_that_skips_base_init_is_told_so_by_state_and_config_too():
    source = SkipsBaseInit(StructuralConfig())
    for call in (source.get_state, lambda: source.set_state({"current_index": 0,
                                                               "current_epoch": 0}),
                 lambda: source.config):
        with pytest.raises(AttributeError) as err:
            call()
        assert str(err.value).endswith(": " + NO_BASE_INIT)
    assert not hasattr(source, "datarax_position")  # still an ordinary missing attribute
    with pytest.raises(SourceContractError) as err:
        list(source)
    assert str(err.value) == NO_BASE_INIT
    with pytest.raises(AttributeError, match="has no attribute 'other'$"):
        source.other  # noqa: B018 - other names keep Python's message


class DrawsFromKey(DataSourceModule):
    """Rule 3's get_batch_at(start, size, key), drawing one number per batch from key."""

    def __init__(self, config: StructuralConfig) -> None:
        super().__init__(config)
        self.rows = nnx.data(jnp.arange(8))

    def __len__(self) -> int:
        return 8

    def get_batch_at(self, start, size, key=None):
        draw = jnp.full((size,), -1.0) if key is None else jax.random.uniform(key)
        return {"x": self.rows[(jnp.arange(size) + start) % 8],
                "draw": jnp.broadcast_to(draw, (size,))}


def _draws(batch_size: int, seed: int = 0, epochs: int = 1) -> list[list[float]]:
    pipeline = Pipeline(source=DrawsFromKey(StructuralConfig()), stages=[],
                        batch_size=batch_size, rngs=nnx.Rngs(seed))
    return [[float(b["draw"][0]) for b in pipeline] for _ in range(epochs)]


def test_get_batch_at_gets_the_batchs_key_in_a_pipeline_and_none_read_directly():
    assert [float(r["draw"]) for r in DrawsFromKey(StructuralConfig())] == [-1.0] * 8
    (fours, next_epoch), (twos,) = _draws(4, epochs=2), _draws(2)
    assert all(0.0 <= d < 1.0 for d in fours + twos)
    assert twos[0] == fours[0] and twos[2] == fours[1]  # batches starting at 0 and at 4
    assert twos[1] not in fours and len(set(fours + next_epoch)) == 4  # a key per start
    assert _draws(4) == [fours] and _draws(4, seed=1) != [fours]  # the rngs decide
    pipeline = Pipeline(source=DrawsFromKey(StructuralConfig()), stages=[], batch_size=2,
                        rngs=nnx.Rngs(0))
    next(iter(pipeline))
    state = pipeline.get_state()
    restored = Pipeline(source=DrawsFromKey(StructuralConfig()), stages=[], batch_size=2,
                        rngs=nnx.Rngs(0))
    restored.set_state(state)
    assert [float(b["draw"][0]) for b in restored] == twos[1:]  # the same after a restore


def test_a_config_declaring_fields_without_dataclass_is_told_to_decorate_it():
    # Rule 2's config is "@dataclass(frozen=True) class CSVDataSourceConfig(StructuralConfig)";
    # without the decorator its fields are class attributes, which no call can set.
    class CSVConfig(StructuralConfig):
        file_path: str | None = None
        delimiter: str = ","

    message = ("CSVConfig declares fields (file_path, delimiter) but is not itself a "
               "dataclass, so it takes none of them: decorate it with "
               "@dataclass(frozen=True), as StructuralConfig is.")
    for build in (lambda: CSVConfig(file_path="rows.csv"), CSVConfig):
        with pytest.raises(TypeError) as err:
            build()
        assert str(err.value) == message

    class Derived(MemorySourceConfig):  # no new fields: a dataclass's subclass
        seed: int  # an inherited field annotated again (for a type checker) is no new one

    assert Derived(shuffle=True, seed=3).seed == 3


def test_a_hugging_face_dataset_object_is_named_with_its_columns_to_pass():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"x": np.arange(4, dtype=np.int32), "t": list("abcd")})
    with pytest.raises(DataraxError) as err:
        MemorySource(MemorySourceConfig(), ds)
    assert str(err.value) == ("MemorySource data must be a dict of arrays or a sequence of "
                              "records, got Dataset; pass its columns, "
                              "data.with_format('numpy')[:] (a Hugging Face Dataset), or "
                              "read a folder written by data.save_to_disk(folder) with "
                              "HFEagerSource.")
    source = MemorySource(MemorySourceConfig(), ds.with_format("numpy")[:])  # the fix works
    assert [(int(r["x"]), r["t"]) for r in source] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]


def test_rngs_given_positionally_is_named_in_one_line_with_its_keyword():
    # The guide passes rngs by keyword (HFStreamingSource(config, rngs=nnx.Rngs(0))).
    from datarax.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        MemorySource(MemorySourceConfig(), [{"x": 1}], nnx.Rngs(0))
    message = str(err.value)
    assert "\n" not in message
    assert ", list [{'x': 1}], Rngs (rngs goes by keyword: rngs=nnx.Rngs(0)). Call " in message
