"""``source[i]``: one record by its index, as Grain's ``ArrayRecordDataSource[i]`` reads it
(the seed's "Grain compatible"): file order, decoded, no position moved, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from int_record_files import damaged_copy, int_decode, write_int_parts
from datarax.core.errors import ConfigError, RecordError
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


decode = int_decode("id")


@pytest.fixture
def source(tmp_path):
    paths = write_int_parts(tmp_path, [5, 12])  # ids 0..11 numbered across two files
    src = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=3),
                                  paths, decode=decode)
    yield src
    src.close()


def test_an_index_reads_that_record_in_file_order_even_when_shuffled(source):
    assert len(source) == 12
    assert [int(source[i]["id"]) for i in range(12)] == list(range(12))
    assert int(source[-1]["id"]) == 11 and int(source[-12]["id"]) == 0
    assert int(source[np.int64(6)]["id"]) == 6  # a NumPy integer is an index too


def test_reading_by_index_moves_no_position(source):
    first = source.get_batch(4)["id"].tolist()
    def position() -> tuple[int, int]:  # (prefetch_cache moves with the read-ahead threads)
        state = source.get_state()
        return state["current_index"], state["current_epoch"]

    before = position()
    assert int(source[0]["id"]) == 0
    assert position() == before == (4, 0)
    rest = source.get_batch(8)["id"].tolist()
    assert sorted(first + rest) == list(range(12))


def test_out_of_range_and_non_integer_indices_are_refused(source):
    with pytest.raises(IndexError, match="index 12 is out of range for 12 records"):
        source[12]
    with pytest.raises(IndexError, match="index -13 is out of range"):
        source[-13]
    with pytest.raises(TypeError, match="indices must be integers.*got slice"):
        source[1:3]
    with pytest.raises(TypeError, match="got bool"):
        source[True]


def test_a_bad_record_names_its_file_and_index(tmp_path):
    good = write_int_parts(tmp_path, [40])[0]
    bad, unreadable = damaged_copy(good, tmp_path / "bad.array_record")
    src = ArrayRecordSourceModule(ArrayRecordSourceConfig(), [bad], decode=decode)
    with pytest.raises(RecordError, match=rf"cannot read record {unreadable[0]} of file '.*bad"):
        src[unreadable[0]]
    src.close()


def test_an_indexed_record_has_the_batches_dtypes(tmp_path):
    # docs/sources/array_record.md: decoded values follow the one dtype policy (int64 that
    # fits -> int32; float64 refused unless cast_float64=True), record by index included
    paths = write_int_parts(tmp_path, [3])
    wide = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths,
                                   decode=lambda raw: {"id": np.int64(decode(raw)["id"])})
    assert wide[2]["id"].dtype == wide.get_batch(3)["id"].dtype == np.int32
    assert int(wide[2]["id"]) == 2
    wide.close()
    floats = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths,
                                     decode=lambda raw: {"f": np.float64(decode(raw)["id"])})
    with pytest.raises(ConfigError, match="field 'f' is float64 but jax_enable_x64 is off"):
        floats[0]
    floats.close()
    cast = ArrayRecordSourceModule(ArrayRecordSourceConfig(cast_float64=True), paths,
                                   decode=lambda raw: {"f": np.float64(decode(raw)["id"])})
    assert cast[1]["f"].dtype == np.float32 and float(cast[1]["f"]) == 1.0
    cast.close()


def test_a_closed_source_refuses_reads_by_index_rather_than_reopening_its_files(source):
    assert int(source[3]["id"]) == 3
    source.close()
    # a read here reopened the file that close() had closed, and no later close() shut it
    with pytest.raises(RuntimeError, match="ArrayRecordSourceModule is closed; build a new source"):
        source[3]
    with pytest.raises(RuntimeError, match="is closed"):
        source.read_records([0])
