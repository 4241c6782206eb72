"""A caller's host buffer stays theirs: datarax's device arrays never share it.

On the CPU backend JAX shares a 64-byte aligned NumPy buffer instead of copying it;
these tests hand datarax such buffers and change them afterwards.
"""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datarax.core import owned
from datarax.core.owned import CPU_SHARED_ALIGNMENT, owned_device_put, unshared
from datarax.core.spec import array_to_spec_strip_leading
from datarax.core.stream import StreamSource, StructuralConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def aligned(shape, dtype=np.float32, offset=0):
    """A zeroed array whose data starts ``offset`` bytes past a 64-byte boundary."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(nbytes + 2 * CPU_SHARED_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % CPU_SHARED_ALIGNMENT + offset
    return raw[start:start + nbytes].view(dtype).reshape(shape)


@pytest.mark.parametrize("offset", [0, 16, 32, 48])
def test_jax_shares_exactly_the_buffers_the_rule_names(offset):
    # Guards CPU_SHARED_ALIGNMENT against the installed JAX: if JAX starts sharing
    # buffers at other alignments, owned_device_put must copy those too.
    host = aligned((256,), offset=offset)
    device = jax.block_until_ready(jax.device_put(host))
    host[:] = 1.0
    shared = float(device.sum()) != 0.0
    assert shared == (offset % CPU_SHARED_ALIGNMENT == 0)


# Thresholds shrunk so that small arrays take each way: a private copy, a private
# aligned copy (JAX shares it), a private copy into memory mapped up front (Linux; JAX
# shares it), and JAX's own copy waited for (where there is no such mapping).
WAYS = {"copy": (1 << 30, 1 << 31), "aligned copy": (0, 1 << 31), "populated": (0, 0),
        "waited": (0, 0)}


@pytest.fixture(params=sorted(WAYS))
def way(request, monkeypatch):
    aligned_from, waited_from = WAYS[request.param]
    monkeypatch.setattr(owned, "ALIGNED_COPY_BYTES", aligned_from)
    monkeypatch.setattr(owned, "WAITED_COPY_BYTES", waited_from)
    if request.param == "waited":
        monkeypatch.setattr(owned, "_populated_copy", lambda array: None)
    return request.param


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MAP_POPULATE"), reason="Linux only")
def test_a_large_copy_is_shared_by_jax_and_outlives_every_python_reference(monkeypatch):
    import gc

    monkeypatch.setattr(owned, "WAITED_COPY_BYTES", 0)
    host = aligned((1 << 18,), offset=16)
    host[:] = np.arange(1 << 18, dtype=np.float32)
    device = owned_device_put(host)
    host[:] = -1.0
    gc.collect()
    _ = [np.ones(1 << 16) for _ in range(64)]  # reuse freed memory, if any was freed
    assert device.unsafe_buffer_pointer() % 4096 == 0  # JAX shares the page-aligned copy
    assert float(device[-1]) == (1 << 18) - 1 and float(device[:1000].sum()) == 499500.0


@pytest.mark.parametrize("offset", [0, 16])
def test_owned_device_put_keeps_the_values_of_the_moment(offset, way):
    rows = 65536  # 768 KiB: JAX's own copy is still running when the buffer changes
    host = aligned((rows, 3), offset=offset)
    want = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    host[:] = want
    device = owned_device_put(host)
    host[:] = -1.0
    np.testing.assert_array_equal(np.asarray(device), want)
    assert device.dtype == np.float32 and device.shape == (rows, 3)


def test_owned_device_put_copies_strided_and_empty_arrays(way):
    host = aligned((4, 4), dtype=np.int32)
    host[:] = np.arange(16).reshape(4, 4)
    column = owned_device_put(host[:, 1])
    empty = owned_device_put(aligned((0, 3)))
    host[:] = 0
    assert column.tolist() == [1, 5, 9, 13]
    assert empty.shape == (0, 3)


def test_a_jax_array_passes_as_it_is():
    value = jax.numpy.arange(3)
    assert owned_device_put(value).tolist() == [0, 1, 2]


@pytest.mark.parametrize("rows", [8, 65536])
@pytest.mark.parametrize("offset", [0, 16])
def test_memory_source_keeps_its_records_when_the_callers_array_changes(offset, rows, way):
    images = aligned((rows, 2), offset=offset)
    want = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    images[:] = want
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), {"x": images}),
                        batch_size=max(4, rows // 16))  # the epoch in a few batches
    images[:] = -1.0  # e.g. the caller normalises their copy in place afterwards
    got = [np.asarray(b["x"]) for b in pipeline]
    np.testing.assert_array_equal(np.concatenate(got), want)


class RefilledBuffer(StreamSource):
    """A stream that fills one preallocated (aligned) buffer per batch, as loaders
    written for speed do."""

    def __init__(self, batches=4, size=4):
        super().__init__(StructuralConfig())
        self.buffer = aligned((size, 2))
        self.batches, self.served = batches, 0

    def get_batch(self, batch_size):
        if self.served >= self.batches:
            return None
        self.buffer[:] = self.served
        self.served += 1
        return {"x": self.buffer[:batch_size]}

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros((1, 2), np.float32))}


def test_batches_handed_out_keep_their_values_when_the_source_refills_its_buffer(way):
    held = [b["x"] for b in Pipeline(source=RefilledBuffer(), batch_size=4)]
    assert [float(np.asarray(x)[0, 0]) for x in held] == [0.0, 1.0, 2.0, 3.0]


def test_sharded_batches_keep_their_values_when_the_source_refills_its_buffer(way):
    mesh = Mesh(np.array(jax.devices()[:1]), ("batch",))
    pipeline = Pipeline(
        source=RefilledBuffer(), batch_size=4, sharding=NamedSharding(mesh, PartitionSpec("batch"))
    )
    held = [b["x"] for b in pipeline]
    assert [float(np.asarray(x)[0, 0]) for x in held] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("offset", [0, 16])
def test_unshared_arrays_keep_process_local_data_apart_from_the_callers_buffer(offset):
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("batch",)), PartitionSpec("batch"))
    host = aligned((8, 2), offset=offset)
    host[:] = 3.0
    placed = jax.make_array_from_process_local_data(sharding, unshared(host))
    host[:] = -1.0
    assert np.asarray(placed).tolist() == [[3.0, 3.0]] * 8


def test_memory_source_keeps_its_text_when_the_callers_object_array_changes():
    words = np.array(["cat", "dog", "emu"], dtype=object)
    source = MemorySource(MemorySourceConfig(), {"id": np.arange(3), "word": words})
    words[0] = "changed"
    assert source.get_batch_at(0, 3)["word"] == ["cat", "dog", "emu"]


def test_a_sealed_fresh_array_passes_to_jax_as_it_is_and_others_are_copied():
    from datarax.core.owned import fresh_aligned, seal

    out = fresh_aligned((512, 64), np.float32)  # 128 KiB
    out[:] = np.arange(64, dtype=np.float32)
    assert out.ctypes.data % CPU_SHARED_ALIGNMENT == 0
    seal(out)
    with pytest.raises(ValueError):
        out[0, 0] = 1.0
    view = out[256:]
    with pytest.raises(ValueError):
        view.flags.writeable = True  # its memory is read-only too
    device = owned_device_put(view)
    assert device.unsafe_buffer_pointer() == view.ctypes.data  # no private copy
    np.testing.assert_array_equal(np.asarray(device), view)
    # an array fresh_aligned did not make, read-only or not, is copied as before
    theirs = np.array(out)
    theirs.flags.writeable = False
    assert owned_device_put(theirs).unsafe_buffer_pointer() != theirs.ctypes.data
    with pytest.raises(ValueError, match="fresh_aligned"):
        seal(np.zeros(4))


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MAP_POPULATE"), reason="Linux only")
@pytest.mark.parametrize("advice", ["populate", "refused", "no libc"])
def test_the_two_threaded_copy_holds_every_row(monkeypatch, advice):
    # rows of 5 float32: the halves' split is not on a page boundary; a strided source
    monkeypatch.setattr(owned, "_free_cpus", lambda: 2)
    if advice == "refused":
        monkeypatch.setattr(owned, "_MADV_POPULATE_WRITE", -1)  # EINVAL: faulted by the copy
    if advice == "no libc":
        monkeypatch.setattr(owned, "_madvise", lambda: None)
    source = np.arange(2 * 100_001 * 5, dtype=np.float32).reshape(100_001, 10)[:, ::2]
    copy = owned._populated_copy(source)
    assert copy is not None and copy.flags.c_contiguous and copy.ctypes.data % 4096 == 0
    np.testing.assert_array_equal(copy, source)
