"""A source's repr: kind, records, fields with dtype and shape, order; nothing read."""

from __future__ import annotations

import numpy as np
from int_record_files import runs, write_parts

from datarax.operators.element import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import (
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    MemorySource,
    MemorySourceConfig,
)
from datarax.text import PackedTextConfig, PackedTextSource


def _memory() -> MemorySource:
    data = {"image": np.zeros((10, 4, 4, 3), np.float32), "label": np.arange(10, dtype=np.int32)}
    return MemorySource(MemorySourceConfig(shuffle=True, seed=3), data=data)


def test_a_memory_source_and_its_pipeline_print_kind_records_fields_and_order() -> None:
    source = _memory()
    expected = ("MemorySource(indexed, 10 records, fields {image: float32[4,4,3], "
                "label: int32[]}, shuffled seed=3)")
    assert repr(source) == expected
    stage = ElementOperator(ElementOperatorConfig(stochastic=False), fn=lambda e, k: e)
    pipeline = Pipeline(source=source, stages=[stage], batch_size=4)
    assert repr(pipeline) == f"Pipeline(batch_size=4, stages=[ElementOperator], source={expected})"


def test_an_array_record_source_prints_its_fields_only_once_a_record_was_decoded(tmp_path):
    paths = write_parts(tmp_path, runs([3, 2]), lambda i: np.asarray([i], np.int32).tobytes())
    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(), paths,
        decode=lambda raw: {"x": np.frombuffer(raw, np.int32)})
    assert repr(source) == "ArrayRecordSourceModule(host, 5 records, in order)"  # nothing read
    assert source.get_batch(2)["x"].tolist() == [[0], [1]]
    assert repr(source) == "ArrayRecordSourceModule(host, 5 records, fields {x: int32[1]}, in order)"
    source.close()
    assert repr(source).startswith("ArrayRecordSourceModule(host, 5 records")  # closed: still prints


def test_a_stream_prints_its_unknown_length() -> None:
    source = PackedTextSource(PackedTextConfig(seq_len=2), lambda: ["a b"], lambda t: [1, 2])
    assert repr(source).startswith("PackedTextSource(stream, length unknown, fields {tokens: int32[2],")
