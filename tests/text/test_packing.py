"""Packer: rows reproduce the documents exactly; segments, positions, targets; restore."""

from __future__ import annotations

import numpy as np
import pytest
from text_helpers import unpack

from datarax.core.errors import ConfigError, StateError
from datarax.text import Packer


def _docs(count: int, seed: int, high: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (1000 * i + np.arange(n)).astype(np.int32)
        for i, n in enumerate(rng.integers(1, high, size=count))
    ]


def _pack_all(packer: Packer, docs: list[np.ndarray], take: int = 5) -> list[dict]:
    out = []
    for i, ids in enumerate(docs):
        packer.add(i, ids)
        while packer.ready >= take:
            out.append(packer.take(take))
    packer.flush()
    while packer.ready:
        out.append(packer.take(take))
    return out


@pytest.mark.parametrize("mode", ["first_fit", "best_fit", "concat"])
@pytest.mark.parametrize("open_rows", [1, 3, 8])
def test_unpacked_rows_are_the_documents_exactly(mode: str, open_rows: int) -> None:
    docs = _docs(120, seed=open_rows, high=40)  # some longer than seq_len=16
    assert max(len(d) for d in docs) > 2 * 16
    packer = Packer(16, mode, open_rows, with_document_index=True)
    batches = _pack_all(packer, docs)
    got = unpack(batches)
    assert sorted(got) == list(range(len(docs)))
    for i, ids in enumerate(docs):
        assert got[i] == ids.tolist(), f"document {i}"
    total = sum(len(d) for d in docs)
    rows = sum(len(b["tokens"]) for b in batches)
    assert packer.tokens_packed == total and packer.rows_packed == rows
    assert packer.efficiency() == pytest.approx(total / (rows * 16))


@pytest.mark.parametrize("mode", ["first_fit", "best_fit", "concat"])
def test_segments_positions_targets_and_mask(mode: str) -> None:
    docs = _docs(60, seed=1, high=30)
    for batch in _pack_all(Packer(12, mode, 4, pad_id=0, with_document_index=True), docs):
        for r in range(len(batch["tokens"])):
            tok, seg, pos, tgt, mask, doc = (
                np.asarray(batch[k][r])
                for k in (
                    "tokens",
                    "segment_ids",
                    "positions",
                    "targets",
                    "loss_mask",
                    "document_index",
                )
            )
            used = int((seg > 0).sum())
            assert (seg[:used] > 0).all() and (seg[used:] == 0).all()  # padding only at the end
            assert (tok[used:] == 0).all() and (doc[used:] == -1).all() and (pos[used:] == 0).all()
            # segment ids count 1, 2, ... and each segment is one document
            starts = np.flatnonzero(np.diff(np.concatenate([[0], seg[:used]])) != 0)
            assert seg[starts].tolist() == list(range(1, len(starts) + 1))
            bounds = list(starts) + [used]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                assert len(set(doc[a:b].tolist())) == 1
                assert pos[a:b].tolist() == list(range(b - a))
                assert tgt[a : b - 1].tolist() == tok[a + 1 : b].tolist()
                assert mask[a : b - 1].tolist() == [1] * (b - a - 1)
                assert mask[b - 1] == 0 and tgt[b - 1] == 0
            assert (mask[used:] == 0).all() and (tgt[used:] == 0).all()


def test_concat_fills_every_row_but_the_last_in_document_order() -> None:
    docs = _docs(50, seed=2, high=25)
    batches = _pack_all(Packer(10, "concat", with_document_index=True), docs)
    tokens = np.concatenate([b["tokens"] for b in batches])
    seg = np.concatenate([b["segment_ids"] for b in batches])
    assert (seg[:-1] > 0).all()
    assert tokens[seg > 0].tolist() == np.concatenate(docs).tolist()


def test_a_long_document_is_cut_into_seq_len_pieces_in_order() -> None:
    packer = Packer(8, "first_fit", 2, with_document_index=True)
    packer.add(0, np.arange(3, dtype=np.int32) + 100)
    packer.add(1, np.arange(21, dtype=np.int32))
    packer.flush()
    rows = packer.take(10)
    assert rows["tokens"].tolist() == [
        list(range(8)),
        list(range(8, 16)),
        [100, 101, 102, 16, 17, 18, 19, 20],
    ]
    assert rows["segment_ids"][2].tolist() == [1, 1, 1, 2, 2, 2, 2, 2]
    assert rows["positions"][2].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]


def test_first_fit_takes_the_first_open_row_best_fit_the_fullest() -> None:
    lengths = [5, 7, 2]  # rows of 10: [5] and [7] open, then a piece of 2
    first, best = Packer(10, "first_fit", 4), Packer(10, "best_fit", 4)
    for p in (first, best):
        for i, n in enumerate(lengths):
            p.add(i, np.full(n, i + 1, np.int32))
        p.flush()
    assert first.take(3)["tokens"][0].tolist()[:7] == [1] * 5 + [3] * 2
    assert best.take(3)["tokens"][1].tolist()[:9] == [2] * 7 + [3] * 2


def test_a_full_set_of_open_rows_emits_the_fullest_first() -> None:
    packer = Packer(10, "first_fit", 2)
    for i, n in enumerate([4, 8, 7]):  # third fits neither open row; the 8 is fuller
        packer.add(i, np.full(n, i + 1, np.int32))
    assert packer.ready == 1
    assert packer.take(1)["tokens"][0].tolist() == [2] * 8 + [0, 0]


@pytest.mark.parametrize("mode", ["first_fit", "concat"])
def test_restore_from_references_gives_identical_next_rows(mode: str) -> None:
    docs = _docs(80, seed=3, high=30)
    full = Packer(16, mode, 4, with_document_index=True)
    reference = _pack_all(full, docs, take=3)
    for cut in (0, 1, 17, 40, 79):
        packer = Packer(16, mode, 4, with_document_index=True)
        served = []
        for i in range(cut):
            packer.add(i, docs[i])
            while packer.ready >= 3:
                served.append(packer.take(3))
        state = packer.get_state()
        assert all(d < cut for d in Packer.documents_in(state))
        fresh = Packer(16, mode, 4, with_document_index=True)
        fresh.restore(state, lambda d: docs[d])
        rest = []
        for i in range(cut, len(docs)):
            fresh.add(i, docs[i])
            while fresh.ready >= 3:
                rest.append(fresh.take(3))
        fresh.flush()
        while fresh.ready:
            rest.append(fresh.take(3))
        got = served + rest
        assert len(got) == len(reference)
        for a, b in zip(got, reference):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
        assert (fresh.tokens_packed, fresh.rows_packed) == (full.tokens_packed, full.rows_packed)


def test_restore_refuses_references_past_a_document() -> None:
    packer = Packer(8, "first_fit", 2)
    packer.add(0, np.arange(5, dtype=np.int32))
    state = packer.get_state()
    with pytest.raises(StateError) as err:
        Packer(8, "first_fit", 2).restore(state, lambda d: np.arange(3, dtype=np.int32))
    assert str(err.value) == (
        "Packer state refers to tokens [0, 5) of document 0, which has 3 tokens now; the "
        "documents or the tokenizer changed since the state was saved. Restore it where they "
        "are as they were, or start the pass afresh ({'current_epoch': E, 'current_index': 0})."
    )


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        Packer(8, "greedy")
    assert (
        str(err.value)
        == "Packer mode must be one of ['first_fit', 'best_fit', 'concat'], got 'greedy'."
    )
