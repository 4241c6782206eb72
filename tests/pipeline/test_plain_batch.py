"""A host batch of exactly the spec's arrays takes the one-pass check (``plain_batch``)
and the copy without a tree walk (``number_arrays``): it passes on what the full check
(``validate_batch`` then ``text_as_lists``) and the tree copy pass on, and anything
else takes the full check, which names what differs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from datarax.core.errors import SpecMismatchError
from datarax.core.spec import TextSpec, validate_batch
from datarax.pipeline import host_pass
from datarax.core.spec import array_fields, plain_batch
from datarax.pipeline.host_pass import number_arrays, text_as_lists

SPEC = {"y": jax.ShapeDtypeStruct((), np.int32), "image": jax.ShapeDtypeStruct((2, 3), np.uint8)}
FIELDS = array_fields(SPEC)


def good(rows: int = 4) -> dict[str, np.ndarray]:
    return {"y": np.arange(rows, dtype=np.int32), "image": np.ones((rows, 2, 3), np.uint8)}


CASES = {
    "exact": good(),
    "short last batch": good(3),
    "more rows than the batch": good(5),
    "missing field": {"y": np.arange(4, dtype=np.int32)},
    "extra field": {**good(), "z": np.zeros(4, np.float32)},
    "other dtype": {**good(), "y": np.arange(4, dtype=np.int64)},
    "other byte order": {**good(), "y": np.arange(4, dtype=">i4")},
    "other shape": {**good(), "image": np.ones((4, 3, 2), np.uint8)},
    "no record axis": {**good(), "y": np.int32(3)},
    "rows disagree": {**good(), "y": np.arange(3, dtype=np.int32)},
    "a list": {**good(), "y": [0, 1, 2, 3]},
    "strings": {**good(), "y": np.array(["a", "b", "c", "d"])},
}


@pytest.mark.parametrize("case", CASES)
def test_a_plain_batch_is_what_the_full_check_passes_on(case) -> None:
    batch = CASES[case]
    plain = plain_batch(batch, FIELDS, batch_size=4)
    try:
        validate_batch(batch, SPEC, batch_size=4)
    except SpecMismatchError:
        assert plain is None  # the full check runs and names the field
        return
    full = text_as_lists(batch, SPEC)
    if plain is not None:
        assert list(plain) == list(full) == ["image", "y"]  # JAX's order of a dict
        assert all(plain[k] is full[k] for k in full)


def test_only_a_flat_spec_of_arrays_has_array_fields() -> None:
    assert FIELDS == (("image", (2, 3), np.dtype(np.uint8)), ("y", (), np.dtype(np.int32)))
    assert array_fields({"word": TextSpec(), **SPEC}) is None
    assert array_fields({"meta": SPEC}) is None
    assert array_fields({}) is None


class _Stats:
    def timer(self, name: str):
        import contextlib

        return contextlib.nullcontext()


def test_the_copy_without_a_tree_walk_is_the_tree_copy(monkeypatch) -> None:
    """Fields in JAX's order, the same values, one device array each; a batch with text
    goes the tree's way and keeps its text on the host."""
    copier = object.__new__(host_pass.HostPass)
    copier.stats = _Stats()
    batches = [{"y": np.arange(4, dtype=np.int32) + i, "image": np.full((4, 2, 3), i, np.uint8)}
               for i in range(3)]
    assert all(map(number_arrays, batches))
    fast = copier._to_device(batches)
    monkeypatch.setattr(host_pass, "number_arrays", lambda batch: False)
    walked = copier._to_device(batches)
    for a, b in zip(fast, walked):
        assert list(a) == list(b) == ["image", "y"]
        assert all(isinstance(a[k], jax.Array) for k in a)
        assert all(np.array_equal(a[k], b[k]) for k in a)
    texts = [{"y": np.arange(2, dtype=np.int32), "word": ["a", "b"]}]
    assert not number_arrays(texts[0])
    monkeypatch.undo()
    (out,) = copier._to_device(texts)
    assert out["word"] == ["a", "b"] and isinstance(out["y"], jax.Array)


def test_the_copy_of_plain_batches_is_the_tree_copy() -> None:
    """Batches the check passed on as plain (fields in the spec's sorted order) are copied
    as they stand: the same fields, order and values as the tree copy."""
    copier = object.__new__(host_pass.HostPass)
    copier.stats = _Stats()
    plain = [plain_batch({"y": np.arange(4, dtype=np.int32) + i,
                          "image": np.full((4, 2, 3), i, np.uint8)}, FIELDS, batch_size=4)
             for i in range(3)]
    fast = copier._to_device(plain, plain=True)
    walked = [jax.tree.map(np.asarray, jax.device_put(b)) for b in plain]
    for a, b in zip(fast, walked):
        assert list(a) == list(b) == ["image", "y"]
        assert all(isinstance(a[k], jax.Array) for k in a)
        assert all(np.array_equal(a[k], b[k]) for k in a)
