"""The one dtype policy on decoded records (ArrayRecord ``decode``, RandomAccessSource)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pytest
from flax import nnx
from int_record_files import write_records

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule, RandomAccessSource

N = 12
INT_FIX = (
    "outside the int32 range, so it cannot be cast to int32 without loss while "
    "jax_enable_x64 is off. Enable x64 with jax.config.update('jax_enable_x64', True), or "
    "cast or drop the field in decode"
)


def write(path, n=N):
    return write_records(path, (np.int64(i).tobytes() for i in range(n)))


def make(path, decode, **config):
    return ArrayRecordSourceModule(
        ArrayRecordSourceConfig(**config), path, decode=decode, num_threads=2
    )


def values(source, key="id", batch_size=5):
    pipeline = Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))
    return [v for b in pipeline for v in np.asarray(b[key]).tolist()]


def test_python_int_and_int64_from_decode_are_narrowed_when_they_fit(tmp_path):
    path = write(tmp_path / "a.array_record")

    def decode(record):
        i = int(np.frombuffer(record, np.int64)[0])
        return {"id": i, "wide": np.int64(i) * 2, "score": i / 2}

    source = make(path, decode)
    spec = source.element_spec()
    assert spec["id"] == jax.ShapeDtypeStruct((), np.int32)
    assert spec["wide"] == jax.ShapeDtypeStruct((), np.int32)
    assert spec["score"] == jax.ShapeDtypeStruct((), np.float32)  # a Python float: JAX's default
    assert values(source) == list(range(N))
    assert values(make(path, decode), "wide") == [2 * i for i in range(N)]
    source.close()


@pytest.mark.parametrize("big", [2**31, -(2**31) - 1])
def test_an_int_from_decode_that_does_not_fit_is_refused_naming_file_record_and_value(tmp_path, big):
    path = write(tmp_path / "a.array_record")

    def decode(record):
        i = int(np.frombuffer(record, np.int64)[0])
        return {"id": big if i == 7 else i}

    with pytest.raises(RecordError) as err:
        values(make(path, decode))
    assert str(err.value) == (
        f"ArrayRecordSourceModule: cannot read record 7 of file '{path}' (epoch 0): field 'id' "
        f"is int64 and holds {big}, {INT_FIX}. The record is otherwise readable: do as above, "
        "or construct the source with on_error='skip' to drop such records (they are "
        "counted and reported)."
    )
    assert (err.value.path, err.value.index) == (path, 7)
    skipping = make(path, decode, on_error="skip")
    assert values(skipping) == [i for i in range(N) if i != 7]
    assert [r.index for r in skipping.skipped_records()] == [7]


def test_float64_from_decode_is_refused_unless_cast_float64(tmp_path):
    path = write(tmp_path / "a.array_record")

    def decode(record):
        return {"x": np.frombuffer(record, np.int64).astype(np.float64)}

    with pytest.raises(ConfigError) as err:
        make(path, decode).element_spec()
    assert str(err.value) == (
        f"ArrayRecordSourceModule: decoding record 0 of file '{path}': field 'x' is float64 "
        "but jax_enable_x64 is off, and datarax never narrows silently. Set cast_float64=True "
        "in the config to cast it to float32, enable x64 with "
        "jax.config.update('jax_enable_x64', True), or cast or drop the field in decode."
    )
    source = make(path, decode, cast_float64=True)
    assert source.element_spec()["x"] == jax.ShapeDtypeStruct((1,), np.float32)
    assert values(source, "x") == [[float(i)] for i in range(N)]
    with pytest.raises(ConfigError, match="ArrayRecordSourceConfig.cast_float64 must be a bool"):
        ArrayRecordSourceConfig(cast_float64="yes")


@dataclass(frozen=True)
class TableConfig(StructuralConfig):
    cast_float64: bool = False


class Table(RandomAccessSource):
    """A user's host source whose records are Python numbers and 64-bit arrays."""

    def __init__(self, config, rows):
        super().__init__(config, num_threads=1)
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def read_records(self, indices):
        return [self.rows[i] for i in indices]


def test_random_access_decode_follows_the_same_policy():
    rows = [{"id": np.int64(i), "f": np.float64(i) / 4} for i in range(N)]
    with pytest.raises(ConfigError, match="Table: decoding record 0: field 'f' is float64 but"):
        Table(TableConfig(), rows).element_spec()
    source = Table(TableConfig(cast_float64=True), rows)
    assert source.element_spec() == {
        "id": jax.ShapeDtypeStruct((), np.int32),
        "f": jax.ShapeDtypeStruct((), np.float32),
    }
    assert values(source, "f") == [i / 4 for i in range(N)]
    source.close()
    rows[3] = {"id": np.int64(2**40), "f": 0.0}
    with pytest.raises(RecordError) as err:
        values(Table(TableConfig(cast_float64=True), rows))
    assert str(err.value).startswith(
        "Table: cannot read record 3 (epoch 0): field 'id' is int64 and holds 1099511627776, "
    )
    assert ".." not in str(err.value)


def test_bytes_from_decode_keep_their_trailing_zero_bytes(tmp_path):
    """A ``bytes`` field comes back byte for byte (numpy's bytes dtype would drop
    trailing NUL bytes: the int64 0 would be b"")."""
    path = write(tmp_path / "a.array_record", n=6)
    raw = [np.int64(i).tobytes() for i in range(6)]

    def decode(record):
        return {"raw": record, "id": int(np.frombuffer(record, np.int64)[0])}

    with make(path, decode, num_epochs=1) as source:
        assert [r["raw"] for r in source] == raw
    with make(path, decode) as source:
        pipeline = Pipeline(source=source, stages=[], batch_size=4)
        assert [v for b in pipeline for v in b["raw"]] == raw
