"""PackedTextSource through the sources conformance checks (datarax.testing).

A row of the table is a packed row here; each is identified by its tokens (the test
documents' tokens are unique), numbered in the order one uninterrupted pass serves them.
Shares of several hosts are not equally long for a packer (each host packs its own
documents), so ``check_shards`` does not apply; the shard tests are in test_source.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from text_helpers import drain, make_texts, word_ids

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.testing import SourceRow
from datarax.testing import conformance as cf
from datarax.text import PackedTextConfig, PackedTextSource

TEXTS = make_texts(24, seed=9, high=20)
CONFIG = PackedTextConfig(seq_len=16, open_rows=3, tokenize_block=5)


def _source() -> PackedTextSource:
    return PackedTextSource(CONFIG, lambda epoch: TEXTS, word_ids)


ROW_NUMBER = {
    tuple(row.tolist()): i
    for i, row in enumerate(np.concatenate([b["tokens"] for b in drain(_source(), 4)]))
}


def _make(shard_index: int = 0, shard_count: int = 1, stages=()) -> Pipeline:
    return Pipeline(
        _source(),
        stages=list(stages),
        batch_size=4,
        rngs=nnx.Rngs(0),
        shard_index=shard_index,
        shard_count=shard_count,
    )


ROW = SourceRow(
    "packed-text",
    _make,
    len(ROW_NUMBER),
    lambda batch: [ROW_NUMBER[tuple(r.tolist())] for r in np.asarray(batch["tokens"])],
    kind="STREAM",
)


def add_noise(element, key):
    return element.update_data({"noise": jax.random.uniform(key, (2,))})


def _noise() -> list:
    # one module-level function: the fresh pipelines of a check find the step compiled
    # before instead of tracing it again
    return [ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise)]


def test_every_pass_serves_every_row_once() -> None:
    assert len(ROW_NUMBER) > 8
    cf.check_epochs(ROW, num_epochs=3)


@pytest.mark.parametrize("level", ["iterator", "pipeline", "source", "nnx"])
def test_resume_at_every_batch_boundary(level: str) -> None:
    assert cf.check_resume(ROW, level, num_epochs=2) > 0


def test_resume_continues_a_stochastic_stage() -> None:
    cf.check_resume(ROW, "iterator", stages=_noise, points=cf.key_points(ROW, 4))


def test_kind_spec_state_and_threads(young_heap) -> None:
    cf.check_kind(ROW)
    cf.check_spec(ROW)
    cf.check_nnx_state_small(ROW)
    cf.check_close_releases_threads(ROW)


def test_orbax_round_trip_of_nnx_state(tmp_path) -> None:
    cf.check_resume(
        ROW, "nnx", points=cf.key_points(ROW, 4), nnx_round_trip=cf.orbax_round_trip(tmp_path)
    )


@pytest.mark.parametrize("level", ["source", "nnx"])
def test_a_restore_under_a_live_iterator_continues_from_there(level: str) -> None:
    # the rows after the state come again, though the worker had packed ahead
    cf.check_restore_live(ROW, level, stages=_noise)


def test_a_direct_read_between_batches_is_served_once() -> None:
    cf.check_direct_read_live(ROW)
