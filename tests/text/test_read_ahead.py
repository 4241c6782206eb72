"""PackedTextSource read ahead on the pipeline's worker thread: the same rows, errors and
skips as packing on the consumer's thread, and the source's state (position, packer
snapshot, skip count and reports, packing stats) is at every moment what was handed out.
(A restore under a live iterator and a direct read between batches are in the
conformance checks: ``check_restore_live``, ``check_direct_read_live``.)"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from flax import nnx
from text_helpers import make_texts, word_ids
from waiting import eventually

from datarax.core.errors import RecordError
from datarax.pipeline import Pipeline
from datarax.text import PackedTextConfig, PackedTextSource

TEXTS = make_texts(120, seed=7, high=30)
BAD = {9, 10, 57}  # empty documents: skipped under on_error="skip"
DOCS = ["" if i in BAD else t for i, t in enumerate(TEXTS)]


def source(**config) -> PackedTextSource:
    defaults = {"seq_len": 16, "open_rows": 3, "tokenize_block": 8,
                "with_document_index": True, "on_error": "skip"}
    return PackedTextSource(PackedTextConfig(**{**defaults, **config}), lambda epoch: DOCS,
                            word_ids)


def pipeline(prefetch: int = 2, **config) -> Pipeline:
    return Pipeline(source(**config), batch_size=4, prefetch=prefetch, rngs=nnx.Rngs(0))


def rows(batch) -> list[list[int]]:
    return np.asarray(batch["tokens"]).tolist()


def _read_ahead_of(src: PackedTextSource, handed_out: int) -> int:
    """Rows the worker packed past what was handed out (waits for it)."""
    text = src._text
    eventually(lambda: text.at is not None and text.at[1] > handed_out)  # at once, unless loaded
    return (text.at or (0, handed_out))[1] - handed_out


@pytest.mark.parametrize("prefetch", [1, 3])
def test_read_ahead_serves_the_rows_packed_on_the_consumers_thread(prefetch) -> None:
    ahead = [rows(b) for _ in range(2) for b in pipeline(prefetch)]
    assert ahead == [rows(b) for _ in range(2) for b in pipeline(0)]


def test_state_is_what_was_handed_out_while_rows_are_packed_ahead() -> None:
    reference = [rows(b) for b in pipeline(0)]
    p = pipeline(3)
    src = p.source
    it = iter(p)
    head = [rows(next(it)) for _ in range(3)]
    assert _read_ahead_of(src, 12) > 0  # the worker did pack on ...
    state = json.loads(json.dumps(src.get_state()))  # ... the state is at row 12
    assert (state["current_epoch"], state["current_index"]) == (0, 12)
    direct = source()
    for _ in range(3):
        direct.get_batch(4)
    assert state == json.loads(json.dumps(direct.get_state()))  # the same snapshot
    assert src.packing_stats() == direct.packing_stats()
    rest = [rows(b) for b in it]

    fresh = pipeline(3)
    fresh.source.set_state(state)
    assert [rows(b) for b in fresh] == rest
    assert head + rest == reference


def test_skips_packed_ahead_are_counted_once_their_rows_are_handed_out() -> None:
    p = pipeline(3)
    src = p.source
    it = iter(p)
    next(it)  # documents 0.. ; the worker packs on past the bad 9 and 10
    _read_ahead_of(src, 4)
    handed = 4
    while src.skipped_documents() == []:
        assert src.get_state()["skipped"] == 0
        next(it)
        handed += 4
    direct = source()
    for _ in range(handed // 4):
        direct.get_batch(4)
    assert src.get_state() == direct.get_state()
    assert [r.index for r in src.skipped_documents()] == [
        r.index for r in direct.skipped_documents()
    ]
    list(it)
    assert [r.index for r in src.skipped_documents()] == sorted(BAD)
    assert src.packing_stats()["skipped"] == 3


def test_a_bad_document_raises_at_its_batch_after_the_batches_before_it() -> None:
    for prefetch in (0, 3):
        before = set(threading.enumerate())
        p = pipeline(prefetch, on_error="raise")
        it = iter(p)
        served = 0
        with pytest.raises(RecordError, match="document 9 of pass 0 is empty"):
            while True:
                next(it)
                served += 4
        assert served > 0 and p.source.get_state()["current_index"] == served
        with pytest.raises(RecordError, match="document 9 of pass 0 is empty"):
            next(it)  # a retry meets the same document again
        assert {t.name for t in set(threading.enumerate()) - before
                if t.is_alive() and t.name == "datarax-dispatch"} == set()


def test_bad_documents_after_the_last_row_are_counted_when_the_pass_ends() -> None:
    docs = TEXTS[:30] + ["", "   "]  # the pass ends with two bad documents

    def build(prefetch: int) -> Pipeline:
        src = PackedTextSource(PackedTextConfig(seq_len=16, on_error="skip"),
                               lambda epoch: docs, word_ids)
        return Pipeline(src, batch_size=4, prefetch=prefetch, rngs=nnx.Rngs(0))

    ahead, direct = build(3), build(0)
    assert [rows(b) for b in ahead] == [rows(b) for b in direct]
    assert [r.index for r in ahead.source.skipped_documents()] == [30, 31]
    assert ahead.source.get_state() == direct.source.get_state()
    assert ahead.source.packing_stats() == direct.source.packing_stats()


def test_packing_stats_count_only_the_rows_handed_out() -> None:
    p = pipeline(3)
    it = iter(p)
    first = next(it)
    _read_ahead_of(p.source, 4)
    stats = p.source.packing_stats()
    assert stats["rows"] >= len(rows(first))  # rows packed up to the position ...
    direct = source()
    direct.get_batch(4)
    assert stats == direct.packing_stats()  # ... exactly as when packing on this thread


def test_a_document_of_thousands_of_rows_reads_ahead_without_rebuilding_its_references() -> None:
    # One document cut into 3,000 rows: every batch read ahead snapshots the ready rows.
    # The snapshots share each row's references (built once), so the pass stays linear in
    # rows; the state handed out is plain JSON lists, and a resume is exact.
    from datarax.text.packing import Packer

    packer = Packer(8)
    packer.add(0, np.arange(1, 24_001, dtype=np.int32))
    first, second = packer.snapshot(), packer.snapshot()
    assert all(a is b for a, b in zip(first["ready"], second["ready"], strict=True))
    assert packer.get_state()["ready"] == [
        {"document": 0, "start": 0, "rows": 3000, "row_tokens": 8}
    ]  # one run of references, not 3,000 rows

    docs = ["1 2 3", " ".join(str(i) for i in range(1, 24_001)), "4 5"]

    def build() -> Pipeline:
        src = PackedTextSource(PackedTextConfig(seq_len=8), lambda: docs, word_ids)
        return Pipeline(src, batch_size=4, rngs=nnx.Rngs(0), prefetch=2)

    reference = [np.asarray(b["tokens"]) for b in build()]
    served = np.concatenate(reference)
    assert sorted(served[served != 0].tolist()) == sorted([1, 2, 3, *range(1, 24_001), 4, 5])
    iterator = iter(build())
    for _ in range(300):
        next(iterator)
    state = iterator.get_state()
    assert json.loads(json.dumps(state)) == state
    assert len(json.dumps(state)) < 1000  # mid-document: 2,700 rows left, one run in the state
    resumed = iter(build())
    resumed.set_state(json.loads(json.dumps(state)))
    rest = [np.asarray(b["tokens"]) for b in resumed]
    assert len(rest) == len(reference) - 300
    assert all(np.array_equal(a, b) for a, b in zip(rest, reference[300:], strict=True))
