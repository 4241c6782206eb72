"""A per-record decode that returns a nested dict is refused with the field's path and
the fix: at the first record as a setting (never skipped as a bad record), at a later
record as that record's error."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from int_record_files import write_records

from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


def write(tmp: pathlib.Path, n: int = 6) -> str:
    return write_records(tmp / "d.array_record", (bytes([i]) for i in range(n)))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_nested_dict_from_the_first_record_is_refused_by_path(tmp_path, on_error) -> None:
    path = write(tmp_path)
    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(on_error=on_error), path,
        decode=lambda b: {"x": np.float32(b[0]), "a": {"b": {"c": np.zeros(3, np.float32)}}})
    with pytest.raises(ConfigError) as err:
        next(iter(Pipeline(source=source, stages=[], batch_size=2)))
    assert str(err.value) == (
        f"ArrayRecordSourceModule: decoding record 0 of file '{path}': decode returned a "
        "nested dict (field 'a/b/c' is inside the dict under 'a'), and a reader's records "
        "are flat dicts of arrays, numbers or strings: return each field at the top level, "
        "e.g. 'a_b_c' for 'a/b/c'.")
    source.close()


def test_an_empty_nested_dict_is_named(tmp_path) -> None:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), write(tmp_path),
                                     decode=lambda b: {"x": np.float32(1), "meta": {}})
    with pytest.raises(ConfigError, match=r"field 'meta' holds an empty dict\), .*: drop 'meta'\.$"):
        source.element_spec()
    source.close()


def test_a_later_record_with_a_nested_dict_is_that_records_error(tmp_path) -> None:
    def decode(raw: bytes) -> dict:
        value = np.float32(raw[0])
        return {"x": {"y": value}} if raw[0] == 3 else {"x": value}

    path = write(tmp_path)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, decode=decode)
    with pytest.raises(RecordError) as err:
        list(Pipeline(source=source, stages=[], batch_size=2))
    assert (f"cannot read record 3 of file '{path}' (epoch 0): decode returned a nested dict (field "
            "'x/y' is inside the dict under 'x'), the first record's fields are flat arrays, "
            "numbers or strings: return each field at the top level, e.g. 'x_y' for 'x/y'. "
            ) in str(err.value)
    source.close()
    skipping = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip"), path, decode=decode)
    served = [v for b in Pipeline(source=skipping, stages=[], batch_size=2)
              for v in np.asarray(b["x"]).tolist()]
    assert served == [0.0, 1.0, 2.0, 4.0, 5.0]
    assert [r.index for r in skipping.skipped_records()] == [3]
    skipping.close()
