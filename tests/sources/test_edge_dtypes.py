"""Values at the dtype edges a user hands a source: bfloat16 NumPy arrays (ml_dtypes),
big-endian arrays, masked arrays."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import DataraxError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources import MemorySource, MemorySourceConfig
from int_record_files import int32, write_records


def batches(source, batch_size=2):
    pipeline = Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0))
    return [b["x"] for b in pipeline]


def test_memory_source_serves_a_numpy_bfloat16_array_as_bfloat16():
    values = np.array([0.5, 3.0, -2.0], dtype=jnp.bfloat16)  # NumPy's, from ml_dtypes
    out = batches(MemorySource(MemorySourceConfig(), {"x": values}))
    assert [b.dtype for b in out] == [jnp.bfloat16, jnp.bfloat16]
    np.testing.assert_array_equal(np.concatenate([np.asarray(b, np.float32) for b in out]),
                                  [0.5, 3.0, -2.0])


@pytest.mark.parametrize("dtype, served", [(">i4", np.int32), (">f4", np.float32),
                                           (">u2", np.uint16), (">i8", np.int32)])
def test_memory_source_serves_big_endian_values_in_native_order(dtype, served):
    values = np.array([1, 258, 70000 % 65536, 7], dtype=dtype)
    out = batches(MemorySource(MemorySourceConfig(), {"x": values}))
    assert {b.dtype for b in out} == {np.dtype(served)}
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in out]),
                                  values.astype(served))


def test_a_decode_returning_big_endian_arrays_is_served_in_native_order(tmp_path):
    path = write_records(os.path.join(tmp_path, "a.array_record"), [int32(i) for i in range(5)])

    def decode(record: bytes) -> dict[str, np.ndarray]:
        return {"x": np.frombuffer(record, np.int32).astype(">f4") * 1.5}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, decode=decode)
    out = batches(source)
    assert {b.dtype for b in out} == {np.dtype(np.float32)}
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in out]).ravel(),
                                  np.arange(5) * 1.5)


def test_memory_source_refuses_a_masked_array_naming_the_first_masked_record():
    values = np.ma.array([1, 2, 3, 4], mask=[0, 0, 1, 0])
    with pytest.raises(DataraxError, match=r"field 'x' is a masked array with masked entries "
                                           r"\(first in record 2\).*value\.filled"):
        MemorySource(MemorySourceConfig(), {"x": values})


def test_memory_source_serves_a_masked_array_with_nothing_masked():
    values = np.ma.array([1, 2, 3], mask=False, dtype=np.int32)
    out = batches(MemorySource(MemorySourceConfig(), {"x": values}))
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in out]), [1, 2, 3])


def test_a_stream_batch_in_big_endian_order_is_refused_naming_the_byte_order():
    from dataclasses import dataclass

    import jax

    from datarax.core.config import StructuralConfig
    from datarax.core.errors import SpecMismatchError
    from datarax.sources import StreamSource

    @dataclass(frozen=True)
    class Settings(StructuralConfig):
        declared: str = "int32"

    class BigEndian(StreamSource):
        def restart(self, epoch):
            self.left = 4

        def get_batch(self, batch_size):
            if not self.left:
                return None
            self.left -= 2
            return {"x": np.arange(2).astype(">i4")}

        def element_spec(self):
            return {"x": jax.ShapeDtypeStruct((), np.dtype(self.config.declared))}

    with pytest.raises(SpecMismatchError, match=r"field 'x' has dtype int32 in non-native byte "
                                                r"order \('>i4'\), declared int32; emit native"):
        batches(BigEndian(Settings()))
    with pytest.raises(SpecMismatchError, match=r"\('>i4'\), which JAX does not hold; declare "
                                                r"and emit int32 in native byte order"):
        batches(BigEndian(Settings(declared=">i4")))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
def test_check_finite_finds_nan_in_a_half_precision_field(dtype):
    from datarax.core.errors import SpecMismatchError

    source = MemorySource(MemorySourceConfig(), {"x": np.array([1.0, 2.0, np.nan], dtype)})
    pipeline = Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0),
                        check_finite=True)
    it = iter(pipeline)
    assert np.asarray(next(it)["x"], np.float32).tolist() == [1.0, 2.0]
    with pytest.raises(SpecMismatchError, match=r"field 'x' of the record at position 2 .* "
                                                r"holds NaN or inf"):
        next(it)
