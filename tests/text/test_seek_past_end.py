"""A seek past the end of a packed pass says it was the seek and names the last row;
a restored position past it keeps the restored-state wording."""

from __future__ import annotations

import pytest
from flax import nnx

from datarax.core.errors import StateError
from datarax.sources import ShuffleBufferSource
from datarax.text import PackedTextConfig, PackedTextSource

TEXTS = ["a b c", "d e f g h", "i j", "k l"]
RESTORED = ("PackedTextSource: the restored position says {} rows of pass 0 were handed out, "
            "but the pass ends after 2; the state comes from other documents or settings.")


def _source(texts=TEXTS) -> PackedTextSource:
    return PackedTextSource(PackedTextConfig(seq_len=8, packing="first_fit"),
                            lambda epoch: texts, lambda text: [1] * len(text.split()))


def _rows() -> int:
    source, rows = _source(), 0
    while (batch := source.get_batch(1)) is not None:
        rows += len(batch["tokens"])
    return rows


def test_a_seek_past_the_end_names_the_seek_and_the_last_row() -> None:
    rows = _rows()
    assert rows == 2
    at_end = _source()
    at_end.seek(0, rows)  # the pass's end: a valid position, nothing left
    assert at_end.get_batch(1) is None
    source = _source()
    source.seek(0, 9)
    with pytest.raises(StateError) as err:
        source.get_batch(1)
    assert str(err.value) == (
        "PackedTextSource.seek(0, 9) is past the end of pass 0: it holds 2 rows, the last "
        "is row 1 (seek(0, 2) stands at its end). Seek to a row up to 2.")


def test_a_restored_position_past_the_end_keeps_the_restored_wording() -> None:
    longer = _source(TEXTS * 3)
    longer.get_batch(5)
    fresh = _source()
    nnx.update(fresh, nnx.state(longer))
    with pytest.raises(StateError, match="the restored position says 5 rows of pass 0 "
                                         "were handed out, but the pass ends after 2"):
        fresh.get_batch(1)
    refused = _source()
    with pytest.raises(StateError, match="the restored position says 9 rows"):
        refused.set_state({"current_epoch": 0, "current_index": 9})
    with pytest.raises(StateError) as err:  # read anyway: still the restore, not a seek
        refused.get_batch(1)
    assert str(err.value) == RESTORED.format(9)


def test_a_restored_position_sought_in_place_as_a_pipeline_does_keeps_the_restored_wording():
    longer = _source(TEXTS * 3)
    longer.get_batch(5)
    fresh = _source()
    nnx.update(fresh, nnx.state(longer))
    fresh.seek(fresh.epoch, fresh.index)  # a pipeline's readers restart there after nnx.update
    with pytest.raises(StateError) as err:
        fresh.get_batch(1)
    assert str(err.value) == RESTORED.format(5)


def test_a_wrapper_standing_the_source_past_its_end_keeps_the_restored_wording() -> None:
    wrapper = ShuffleBufferSource(_source(), buffer_size=3)
    wrapper.seek(0, 9)  # the wrapper's seek, not the text source's
    with pytest.raises(StateError) as err:
        wrapper.get_batch_with_indices(2)
    assert str(err.value) == RESTORED.format(9)
