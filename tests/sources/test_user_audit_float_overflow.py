"""``cast_float64=True`` casts float64 to float32 on purpose, but never turns a finite
value into ``inf``: such a value is refused naming the field, the record and the value,
by every source whose values datarax sees."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import RecordError
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig

VALUES = np.array([1.5, -2.0, 1e300, 4.0])
MESSAGE = ("field 'x' is float64 and record 2 holds 1e+300, beyond the float32 range, so "
           "casting it to float32 would make it inf.")


def test_memory_source_refuses_a_value_the_cast_makes_inf():
    with pytest.raises(RecordError) as err:
        MemorySource(MemorySourceConfig(cast_float64=True), {"x": VALUES})
    assert str(err.value).startswith(f"MemorySource: {MESSAGE}")
    assert err.value.index == 2
    with pytest.raises(RecordError, match="record 1 holds 1e\\+300, beyond the float32 range"):
        MemorySource(MemorySourceConfig(), [{"x": 1.5}, {"x": 1e300}])  # Python floats


def test_values_in_range_and_infinities_are_cast_as_they_are():
    data = {"x": np.array([1.5, 3e38, np.inf, -np.inf])}
    source = MemorySource(MemorySourceConfig(cast_float64=True), data)
    batch = source.get_batch_at(0, 4)
    assert batch["x"].dtype == np.float32
    assert np.asarray(batch["x"]).tolist() == np.float32(data["x"]).tolist()


def test_npy_source_refuses_it_naming_the_file_and_record(tmp_path):
    path = str(tmp_path / "x.npy")
    np.save(path, VALUES)
    source = NpySource(NpySourceConfig(paths=path, field="x", cast_float64=True))
    with pytest.raises(RecordError) as err:
        list(Pipeline(source=source, stages=[], batch_size=4))
    source.close()
    assert f"cannot read record 2 of file '{path}'" in str(err.value)
    assert "holds 1e+300, beyond the float32 range" in str(err.value)


def test_hf_eager_source_refuses_it(tmp_path):
    pytest.importorskip("datasets")
    from hf_files import write_hub_split

    from datarax.sources import HFEagerConfig, HFEagerSource

    write_hub_split(tmp_path, {"x": VALUES})
    with pytest.raises(RecordError) as err:
        HFEagerSource(HFEagerConfig(name=str(tmp_path), split="train", cast_float64=True))
    assert str(err.value).startswith(f"HFEagerSource: {MESSAGE}")
