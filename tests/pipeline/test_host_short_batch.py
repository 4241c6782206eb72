"""A host source's short last batch runs through the per-record stages' one compiled
step (padded, then cut): the user's stage function is traced once for the whole
epoch, and the short batch holds the same values as the records run alone."""

from __future__ import annotations

import numpy as np
from flax import nnx

from datarax.dataset import write_dataset
from datarax.operators import BatchMixOperator, ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


def folder(tmp_path, n=20):
    rows = [{"x": np.full(3, i, np.float32), "label": i % 4} for i in range(n)]
    write_dataset(rows, tmp_path / "ds", shards=2)
    return str(tmp_path / "ds")


def counting_stage(traces):
    def fn(element, key):
        traces.append(element.data["x"].shape)
        return element.update_data({"x": element.data["x"] * 2 + 1})

    return ElementOperator(ElementOperatorConfig(stochastic=True), fn=fn)


def test_short_last_batch_reuses_the_epoch_step(tmp_path):
    traces: list = []
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=1),
                                     folder(tmp_path))
    pipeline = Pipeline(source=source, stages=[counting_stage(traces)], batch_size=8,
                        rngs=nnx.Rngs(0))
    try:
        batches = list(pipeline)
    finally:
        source.close()
    assert [b["x"].shape[0] for b in batches] == [8, 8, 4]
    assert len(traces) == 1  # one step for the full batches and the short last one
    x = np.concatenate([np.asarray(b["x"]) for b in batches])
    assert sorted(x[:, 0].tolist()) == [2.0 * i + 1 for i in range(20)]
    assert (x == x[:, :1]).all()


def test_batch_level_stage_sees_only_the_short_batch_records(tmp_path):
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), folder(tmp_path))
    mix = BatchMixOperator(mode="mixup", alpha=0.5, data_field="x", num_classes=4)
    pipeline = Pipeline(source=source, stages=[mix], batch_size=8, rngs=nnx.Rngs(0))
    try:
        last = list(pipeline)[-1]
    finally:
        source.close()
    x = np.asarray(last["x"])[:, 0]
    assert x.shape == (4,) and ((x >= 16) & (x <= 19)).all()  # mixed among records 16-19 only
