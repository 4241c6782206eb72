"""A state handed to the wrong restore: the error names what it got and the right call.

The guides show three states: ``source.get_state()`` (ArrayRecord quick reference),
``pipeline.get_state()`` / ``iterator.get_state()``, and ``nnx.state(pipeline)``. A user
who passes one where another belongs is told which one it is and how to restore it,
not that a key is missing or that a shuffle setting differs.
"""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import StateError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def memory_pipeline() -> Pipeline:
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0))


@pytest.fixture
def used():
    pipeline = memory_pipeline()
    it = iter(pipeline)
    next(it)
    return pipeline


def test_a_pipeline_state_given_to_a_source(used):
    with pytest.raises(StateError, match=r"MemorySource.set_state got a Pipeline's state .* "
                                          r"pipeline.set_state\(state\)"):
        memory_pipeline().source.set_state(used.get_state())


def test_a_source_state_given_to_a_pipeline_or_iterator(used):
    state = used.source.get_state()
    with pytest.raises(StateError, match=r"got a source's state .* pipeline.source.set_state"):
        memory_pipeline().set_state(state)
    with pytest.raises(StateError, match=r"got a source's state"):
        iter(memory_pipeline()).set_state(state)
    fresh = memory_pipeline()
    fresh.source.set_state(state)  # the call the message names
    assert [b["x"].tolist() for b in fresh] == [[3, 4, 5], [6, 7, 8], [9]]


def test_an_nnx_state_given_to_set_state(used):
    with pytest.raises(StateError, match=r"got State\. An nnx.state\(pipeline\) is restored "
                                          r"with nnx.update\(pipeline, state\)"):
        memory_pipeline().set_state(nnx.state(used))


def test_a_shuffled_array_record_source_names_a_pipeline_state(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import int32, write_records

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    path = write_records(tmp_path / "a.array_record", map(int32, range(7)))

    def make():
        return ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True), path)

    with make() as source:
        pipeline = Pipeline(source=source, stages=[], batch_size=3)
        next(iter(pipeline))
        state = pipeline.get_state()
    with make() as fresh, pytest.raises(
        StateError, match=r"got a Pipeline's state .*its 'source' entry is the source's own"
    ):
        fresh.set_state(state)
    with make() as fresh:
        fresh.set_state(state["source"])  # what the message points to
        assert fresh.get_state()["current_index"] == 3


def test_a_state_of_another_kind_of_source_names_both_settings_not_a_none_value(tmp_path):
    """An ArrayRecord state given to a MemorySource (or back) is not 'saved with
    shuffle=None': the message lists both sources' settings."""
    pytest.importorskip("array_record.python.array_record_module")
    from int_record_files import write_records

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    path = write_records(tmp_path / "a.array_record", (bytes([i]) for i in range(10)))
    with ArrayRecordSourceModule(ArrayRecordSourceConfig(), path) as records:
        next(iter(records))
        saved = records.get_state()
        with pytest.raises(StateError) as info:
            memory_pipeline().source.set_state(saved)
        assert str(info.value).startswith(
            "MemorySource state was saved by a source of other settings: the state's are "
            "['shuffle_files', 'on_error', 'files'], this source's ['shuffle'] ('shuffle' only "
            "in this source): it comes from another kind of source")
        assert info.value.field == "shuffle"
        shuffled = MemorySource(MemorySourceConfig(shuffle=True), {"x": np.arange(10)})
        with pytest.raises(StateError, match=r"the state's are \['shuffle', 'seed'\], this "
                                             r"source's \['shuffle_files', 'on_error'\]"):
            records.set_state(shuffled.get_state())
