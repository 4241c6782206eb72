"""Nested fields on the host path: spec checks walk the whole tree, naming fields by path."""

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.batch import batch_length, concat_batches, take_records
from datarax.core.errors import SpecMismatchError
from datarax.core.spec import TextSpec, check_spec_x64, first_nonfinite, validate_batch
from datarax.core.stream import StreamSource, StructuralConfig
from datarax.pipeline import Pipeline

SPEC = {
    "x": jax.ShapeDtypeStruct((2,), np.float32),
    "meta": {"id": jax.ShapeDtypeStruct((), np.int32), "name": TextSpec(())},
}


class Nested(StreamSource):
    """A custom stream whose records carry a nested ``meta`` dict."""

    def __init__(self, n, spec=SPEC, id_dtype=np.int32):
        super().__init__(StructuralConfig())
        self.n, self.next_value, self.spec, self.id_dtype = n, 0, spec, id_dtype

    def restart(self, epoch):
        self.next_value = 0

    def get_batch(self, batch_size):
        if self.next_value >= self.n:
            return None
        ids = np.arange(self.next_value, min(self.n, self.next_value + min(3, batch_size)), dtype=self.id_dtype)
        self.next_value += len(ids)  # short batches of 3 mid-pass: the pipeline joins them
        x = np.stack([ids, -ids], axis=1).astype(np.float32)
        return {"x": x, "meta": {"id": ids, "name": [f"r{i}" for i in ids]}}

    def element_spec(self):
        return self.spec


def test_a_nested_stream_works_through_get_batch():
    pipeline = Pipeline(source=Nested(10), stages=[], batch_size=4, rngs=nnx.Rngs(0))
    batches = list(pipeline)
    assert [np.asarray(b["meta"]["id"]).tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b["meta"]["name"] for b in batches][2] == ["r8", "r9"]
    assert np.asarray(batches[0]["x"]).tolist() == [[0, 0], [1, -1], [2, -2], [3, -3]]
    assert isinstance(batches[0]["meta"]["id"], jax.Array)
    shard = Pipeline(source=Nested(10), stages=[], batch_size=2, rngs=nnx.Rngs(0), shard_index=1, shard_count=2)
    assert [int(i) for b in shard for i in np.asarray(b["meta"]["id"])] == [1, 3, 5, 7, 9]


def test_a_nested_field_that_disagrees_is_named_by_path():
    spec = {"x": SPEC["x"], "meta": {"id": jax.ShapeDtypeStruct((), np.int16), "name": TextSpec(())}}
    pipeline = Pipeline(source=Nested(10, spec=spec), stages=[], batch_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(SpecMismatchError) as err:
        next(iter(pipeline))
    assert str(err.value) == (
        "Nested batch at record 0 of epoch 0 does not match element_spec(): field 'meta/id' "
        "has dtype int32, declared int16. Make the source emit exactly what element_spec() "
        "declares (same keys, per-record shapes and dtypes)."
    )
    assert err.value.fields == ["meta/id"]


def test_validate_batch_walks_the_tree():
    good = {"x": np.zeros((2, 2), np.float32), "meta": {"id": np.zeros(2, np.int32), "name": ["a", "b"]}}
    validate_batch(good, SPEC)
    bad = {"x": good["x"], "meta": {"id": np.zeros(3, np.int32), "extra": ["a", "b"]}}
    with pytest.raises(SpecMismatchError) as err:
        validate_batch(bad, SPEC, where="b")
    assert str(err.value) == (
        "b does not match element_spec(): field 'meta/name' is declared in element_spec() but "
        "missing; field 'meta/extra' is not declared in element_spec(); fields disagree on the "
        "number of records ('x': 2, 'meta/id': 3). Make the source emit exactly what "
        "element_spec() declares (same keys, per-record shapes and dtypes)."
    )
    assert err.value.fields == ["meta/name", "meta/extra", "x", "meta/id"]


def test_declared_64bit_nested_field_is_refused_by_path():
    spec = {"x": SPEC["x"], "meta": {"id": jax.ShapeDtypeStruct((), np.int64)}}
    with pytest.raises(SpecMismatchError) as err:
        check_spec_x64(spec, where="Nested.element_spec()")
    assert str(err.value) == (
        "Nested.element_spec() declares 64-bit field(s) 'meta/id' (int64) but jax_enable_x64 "
        "is off, so JAX would silently narrow them to 32 bits. Cast in the source (e.g. "
        "x.astype(np.float32) / np.int32) or enable x64 with "
        "jax.config.update('jax_enable_x64', True)."
    )
    assert err.value.fields == ["meta/id"]
    pipeline = Pipeline(source=Nested(4, spec=spec), stages=[], batch_size=2, rngs=nnx.Rngs(0))
    with pytest.raises(SpecMismatchError, match="'meta/id' \\(int64\\)"):
        next(iter(pipeline))


def test_batch_helpers_and_nonfinite_check_walk_nested_fields():
    a = {"x": np.arange(2), "m": {"t": ["a", "b"], "v": np.array([0.0, np.nan])}}
    b = {"x": np.arange(1), "m": {"t": ["c"], "v": np.array([1.0])}}
    assert batch_length(a) == 2
    joined = concat_batches([a, b])
    assert joined["m"]["t"] == ["a", "b", "c"] and joined["x"].tolist() == [0, 1, 0]
    picked = take_records(joined, [2, 0])
    assert picked["m"]["t"] == ["c", "a"] and picked["m"]["v"].tolist() == [1.0, 0.0]
    assert first_nonfinite(a) == ("m/v", 1)


def test_direct_iteration_of_a_nested_stream_gives_nested_records():
    records = list(Nested(4))
    assert [r["meta"]["name"] for r in records] == ["r0", "r1", "r2", "r3"]
    assert [int(r["meta"]["id"]) for r in records] == [0, 1, 2, 3]
    assert records[2]["x"].tolist() == [2.0, -2.0]
