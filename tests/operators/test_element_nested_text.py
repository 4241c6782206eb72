"""ElementOperator over batches holding text and nested fields (host path)."""

import numpy as np

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
