"""ElementOperator over batches holding text and nested fields (host path)."""

import numpy as np
import pytest

from datarax.core.dtypes import NarrowingError
from datarax.operators import ElementOperator, ElementOperatorConfig


def test_text_and_nested_fields_run_record_by_record_and_stack_back():
    def tag(element, key=None):
        data = element.data
        return {
            "text": data["text"].upper(),
            "meta": {"id": data["meta"]["id"] * 10, "name": data["meta"]["name"] + "!"},
        }

    op = ElementOperator(ElementOperatorConfig(), fn=tag)
    batch = {
        "text": ["a", "b", "c"],
        "meta": {"id": np.arange(3, dtype=np.int32), "name": np.asarray(["x", "y", "z"])},
    }
    out = op.apply_batch(batch, None)
    assert out["text"] == ["A", "B", "C"]
    assert out["meta"]["name"] == ["x!", "y!", "z!"]
    assert np.asarray(out["meta"]["id"]).tolist() == [0, 10, 20]
    assert np.asarray(out["meta"]["id"]).dtype == np.int32


def test_64bit_outputs_on_the_host_are_narrowed_only_when_nothing_is_lost():
    def widen(element, key=None):
        i = int(element.data["meta"]["id"])
        return {"meta": {**element.data["meta"], "big": np.int64(2**40 if i == 2 else i)},
                "score": i / 4, "huge": np.float64(1e300 if i == 3 else i)}

    batch = {"text": ["a", "b", "c"],
             "meta": {"id": np.arange(3, dtype=np.int32), "name": np.asarray(["x", "y", "z"])}}
    fits = ElementOperator(ElementOperatorConfig(), fn=lambda e, key=None: {
        "n": np.int64(int(e.data["meta"]["id"]) - 2**31), "score": int(e.data["meta"]["id"]) / 4})
    out = fits.apply_batch(batch, None)  # in range: int32, and float32 as a traced fn gives
    assert np.asarray(out["n"]).dtype == np.int32
    assert np.asarray(out["n"]).tolist() == [-2**31, 1 - 2**31, 2 - 2**31]
    assert np.asarray(out["score"]).dtype == np.float32
    assert np.asarray(out["score"]).tolist() == [0.0, 0.25, 0.5]
    op = ElementOperator(ElementOperatorConfig(), fn=widen)
    with pytest.raises(NarrowingError) as err:  # never wrapped (2**40 -> 0) nor made inf
        op.apply_batch(batch, None)
    assert str(err.value) == (
        "ElementOperator 'widen': field 'meta/big' is int64 and holds 1099511627776, outside "
        "the int32 range, so it cannot be cast to int32 without loss while jax_enable_x64 is "
        "off. Enable x64 with jax.config.update('jax_enable_x64', True), or return 32-bit "
        "values from fn (np.int32, np.float32).")
    batch["meta"]["id"] = np.asarray([0, 1, 3], np.int32)
    with pytest.raises(NarrowingError, match=r"field 'huge' is float64 and holds 1e\+300, beyond "
                       "the float32 range, so casting it to float32 would make it inf"):
        op.apply_batch(batch, None)
