"""``pickle`` / ``cloudpickle`` of sources and pipelines (mid-epoch too): the unpickled
one continues at the position it holds, as ``copy.deepcopy`` does; an iterator is refused
by name."""

import copy
import os
import pickle

import cloudpickle
import jax
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources import MemorySource, MemorySourceConfig
from int_record_files import int32, write_records


def jitter(element, key):
    return element.update_data({"x": element.data["x"] + jax.random.randint(key, (), 0, 100)})


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"x": np.frombuffer(record, np.int32)[0]}


def memory_pipeline():
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(10, dtype=np.int32), "t": [f"r{i}" for i in range(10)]})
    stage = ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="augment"),
                            fn=jitter, rngs=nnx.Rngs(augment=5))
    return Pipeline(source=source, stages=[stage], batch_size=4, rngs=nnx.Rngs(0))


def values(batches):
    return [(np.asarray(b["x"]).tolist(), list(b.get("t", []))) for b in batches]


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads),
                                          (cloudpickle.dumps, cloudpickle.loads)])
def test_a_pipeline_pickled_mid_epoch_continues_where_the_original_stands(dumps, loads):
    pipeline = memory_pipeline()
    it = iter(pipeline)
    next(it)
    twin = loads(dumps(pipeline))
    expected = values(copy.deepcopy(pipeline))
    assert len(expected) == 2  # batches 2 and 3 of the epoch
    assert values(twin) == expected
    assert values(it) == expected  # the original's pass is left alone
    assert values(twin) == values(pipeline)  # the next epoch too: same keys, same order


def test_a_pipeline_with_a_lambda_stage_goes_through_cloudpickle():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
    pipeline = Pipeline(source=source, stages=[lambda batch: {"x": batch["x"] * 2}],
                        batch_size=2, rngs=nnx.Rngs(0))
    twin = cloudpickle.loads(cloudpickle.dumps(pipeline))
    assert [b["x"].tolist() for b in twin] == [[0, 2], [4, 6], [8]]


def test_a_shuffled_file_source_pickled_mid_epoch_reads_the_rest_with_its_own_reader(tmp_path):
    path = write_records(os.path.join(tmp_path, "a.array_record"), [int32(i) for i in range(10)])
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=1),
                                     path, decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    first = np.asarray(next(it)["x"]).tolist()
    twin = pickle.loads(pickle.dumps(pipeline))
    rest = [np.asarray(b["x"]).tolist() for b in twin]
    assert sorted(first + sum(rest, [])) == list(range(10))
    assert rest == [np.asarray(b["x"]).tolist() for b in it]


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps, cloudpickle.dumps])
def test_an_iterator_is_refused_naming_the_pipeline_to_copy_instead(how):
    it = iter(memory_pipeline())
    next(it)
    with pytest.raises(TypeError, match=r"A PipelineIterator cannot be copied or pickled.*"
                                        r"copy.deepcopy\(pipeline\) or pickle.dumps\(pipeline\)"):
        how(it)
    assert len(values(it)) == 2  # still usable


def test_a_pipeline_over_a_mixture_of_a_file_source_pickles_mid_epoch(tmp_path):
    from datarax.sources import ConcatSource, MixSource

    path = write_records(os.path.join(tmp_path, "a.array_record"), [int32(i) for i in range(6)])
    files = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True), path,
                                    decode=decode)
    memory = MemorySource(MemorySourceConfig(), {"x": np.arange(100, 106, dtype=np.int32)})
    source = MixSource([ConcatSource([files, memory]), MemorySource(
        MemorySourceConfig(), {"x": np.arange(200, 204, dtype=np.int32)})], weights=[0.5, 0.5],
        seed=0)
    pipeline = Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    next(it)
    twin = cloudpickle.loads(cloudpickle.dumps(pipeline))
    rest = [np.asarray(b["x"]).tolist() for b in twin]
    assert rest and rest == [np.asarray(b["x"]).tolist() for b in it]


@pytest.mark.parametrize("how", [copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))])
@pytest.mark.parametrize("node, left_after_one", [(lambda p: p.take(3), 2),
                                                  (lambda p: p.repeat(2), 2 + 3)],
                         ids=["take", "repeat"])
def test_a_take_or_repeat_copied_mid_way_serves_what_the_original_has_left(
        how, node, left_after_one):
    source = MemorySource(MemorySourceConfig(shuffle=True), {"x": np.arange(10, dtype=np.int32)})
    original = node(Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0)))
    next(original)
    twin = how(original)
    left = [b["x"].tolist() for b in twin]
    assert left == [b["x"].tolist() for b in original]
    assert len(left) == left_after_one  # repeat(2): 2 of this pass and 3 of the next
    assert twin.get_state() == original.get_state()
