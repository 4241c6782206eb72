"""A broken skip budget of PackedTextSource stops at the batch whose rows would pass the
bad document, after every batch before it, whatever the read-ahead; a state saved there
(before or after the error) and a retry meet the same error at the same batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flax import nnx
from text_helpers import make_texts, word_ids

from datarax.core.errors import RecordError
from datarax.pipeline import Pipeline
from datarax.text import PackedTextConfig, PackedTextSource

BAD = 150
DOCS: list = make_texts(200, seed=4, high=40)
DOCS[BAD] = 7  # not text


def _source(**config) -> PackedTextSource:
    return PackedTextSource(
        PackedTextConfig(seq_len=16, open_rows=3, tokenize_block=7, with_document_index=True,
                         on_error="skip", **config),
        lambda epoch: DOCS, word_ids)


def _pipeline(prefetch: int) -> Pipeline:
    return Pipeline(_source(max_skipped=0), batch_size=4, rngs=nnx.Rngs(0), prefetch=prefetch)


def _first_batch_after_bad() -> tuple[list[dict], int]:
    """Without a budget: every batch, and the first one holding a document after BAD."""
    batches = [dict(b) for b in Pipeline(_source(), batch_size=4, rngs=nnx.Rngs(0))]
    after = next(i for i, b in enumerate(batches) if np.asarray(b["document_index"]).max() > BAD)
    return batches, after


def _served_until_error(iterator) -> list[dict]:
    served = []
    with pytest.raises(RecordError, match="over the budget of 0") as err:
        for batch in iterator:
            served.append(dict(batch))
    assert err.value.index == BAD
    return served


@pytest.mark.parametrize("prefetch", [0, 2, 8])
def test_budget_error_comes_at_the_batch_passing_the_bad_document(prefetch: int) -> None:
    reference, after = _first_batch_after_bad()
    assert 0 < after < len(reference) - 1
    pipeline = _pipeline(prefetch)
    iterator = iter(pipeline)
    served, states = [], []
    with pytest.raises(RecordError, match="over the budget of 0"):
        while True:
            states.append(json.loads(json.dumps(iterator.get_state())))
            served.append(dict(next(iterator)))
    assert len(served) == after  # every good batch before it was served
    for got, want in zip(served, reference):
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
    # the state saved before the failing batch, and the one saved after the error, both
    # resume at that batch and meet the error there again
    for state in (states[-1], json.loads(json.dumps(iterator.get_state()))):
        assert state["position"] == 4 * after
        fresh = _pipeline(prefetch)
        fresh.set_state(state)
        assert _served_until_error(iter(fresh)) == []
    # a state saved mid-way serves the batches between, then the error
    fresh = _pipeline(prefetch)
    fresh.set_state(states[after // 2])
    assert len(_served_until_error(iter(fresh))) == after - after // 2


def test_a_retry_after_the_budget_error_meets_it_again() -> None:
    _, after = _first_batch_after_bad()
    source = _source(max_skipped=0)
    for _ in range(after):
        source.get_batch(4)
    for _ in range(2):  # the retry packs the same rows again and meets the same document
        with pytest.raises(RecordError, match="over the budget of 0") as err:
            source.get_batch(4)
        assert err.value.index == BAD
