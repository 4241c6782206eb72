"""The epoch-end rule for PackedTextSource, through every restore route.

PackedTextSource is a stream whose rows are packed documents, so it has no row in the
conformance table's record-id form; here each document is exactly one row (``concat``
packing, ``seq_len`` tokens per document), which gives every row a record id and lets
:func:`datarax.testing.check_resume` check it like any other source: a state taken
inside the ``for`` after an epoch's last batch restores to an empty pass and then the
next epoch; a state taken after the pass ended says the next epoch and restores to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.testing import SourceRow, check_resume, orbax_round_trip
from datarax.text import PackedTextConfig, PackedTextSource

SEQ_LEN, DOCUMENTS, BATCH = 4, 7, 3


def documents(epoch: int) -> list[str]:
    """Document ``d`` of a pass: ``SEQ_LEN`` copies of ``10 * d + 1``, in an order that
    changes with the epoch."""
    order = [(d * 3 + epoch) % DOCUMENTS for d in range(DOCUMENTS)]
    return [" ".join([str(10 * d + 1)] * SEQ_LEN) for d in order]


def tokenize(text: str) -> list[int]:
    return [int(word) for word in text.split()]


def make(shard_index: int = 0, shard_count: int = 1, stages: Any = ()) -> Pipeline:
    source = PackedTextSource(
        PackedTextConfig(seq_len=SEQ_LEN, packing="concat", num_epochs=-1), documents, tokenize
    )
    return Pipeline(source=source, stages=list(stages), batch_size=BATCH, rngs=nnx.Rngs(0),
                    shard_index=shard_index, shard_count=shard_count)


ROW = SourceRow("packed_text", make, DOCUMENTS, lambda b: (np.asarray(b["tokens"])[:, 0] // 10),
                shuffled=True, kind="STREAM")


@pytest.mark.parametrize("level", ["iterator", "pipeline", "source", "nnx"])
def test_packed_text_epoch_ends_through_every_route(level: str) -> None:
    # 7 rows, batches of 3: epochs end after batches 3 and 6; check those and one inside
    assert check_resume(ROW, level, num_epochs=2, points=[2, 3, 6]) == 9


def test_packed_text_epoch_end_through_orbax(tmp_path) -> None:
    assert check_resume(ROW, "nnx", num_epochs=1, points=[3],
                        nnx_round_trip=orbax_round_trip(tmp_path)) == 6


def test_packed_text_state_says_which_side_of_the_epoch_end() -> None:
    pipeline = make()
    iterator = iter(pipeline)
    for _ in range(3):
        next(iterator)
    inside = pipeline.get_state()
    assert (inside["epoch"], inside["position"]) == (0, DOCUMENTS)  # epoch 0, nothing left
    assert list(iterator) == []
    after = pipeline.get_state()
    assert (after["epoch"], after["position"]) == (1, 0)  # the start of epoch 1
