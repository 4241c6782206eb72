"""A state saved mid-epoch, restored after the data on disk grew: refused naming the
record count and why, never resumed over other records."""

import os

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import StateError
from datarax.pipeline import Pipeline
from datarax.sources import NpySource, NpySourceConfig


def save_replacing(path, array):
    """Write a new file and rename it over ``path``: a pipeline still reading the old one
    (memory-mapped) keeps its records."""
    np.save(path.with_suffix(".new.npy"), array)
    os.replace(path.with_suffix(".new.npy"), path)


def npy_pipeline(path):
    return Pipeline(source=NpySource(NpySourceConfig(paths=str(path), shuffle=True, seed=2)),
                    stages=[], batch_size=4, rngs=nnx.Rngs(0))


def test_a_state_restored_after_the_file_grew_is_refused_naming_the_record_counts(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(10, dtype=np.int32))
    pipeline = npy_pipeline(path)
    it = iter(pipeline)
    next(it)
    state = it.get_state()
    save_replacing(path, np.arange(14, dtype=np.int32))  # the data grew on disk
    with pytest.raises(StateError, match=r"saved with num_records=10 but this pipeline has "
                                         r"num_records=14 \(.*gained or lost records since "
                                         r"the state was saved") as info:
        npy_pipeline(path).set_state(state)
    assert info.value.field == "num_records"
    save_replacing(path, np.arange(10, dtype=np.int32))  # the data as saved: it resumes
    resumed = npy_pipeline(path)
    resumed.set_state(state)
    assert [b["data"].tolist() for b in resumed] == [b["data"].tolist() for b in it]
