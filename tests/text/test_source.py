"""PackedTextSource: every document once per pass, exact resume anywhere, shards, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flax import nnx
from source_reads import with_numpy_ints
from text_helpers import drain, make_texts, unpack, word_ids

from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.pipeline import Pipeline
from datarax.text import FunctionDocuments, PackedTextConfig, PackedTextSource

TEXTS = make_texts(90, seed=4, high=40)


def every_pass_texts(epoch: int) -> list[str]:
    """TEXTS in every pass (one function object: rebuilt pipelines find their step)."""
    return TEXTS


def _source(texts=TEXTS, **config) -> PackedTextSource:
    defaults = dict(seq_len=16, open_rows=3, tokenize_block=7, with_document_index=True)
    defaults.update(config)
    docs = every_pass_texts if texts is TEXTS else (lambda epoch: texts)
    return PackedTextSource(PackedTextConfig(**defaults), docs, word_ids)


def _assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for key in x:
            np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]))


@pytest.mark.parametrize("packing", ["first_fit", "best_fit", "concat"])
def test_a_pass_serves_every_document_once_and_exactly(packing: str) -> None:
    batches = drain(_source(packing=packing), 5)
    got = unpack(batches)
    assert sorted(got) == list(range(len(TEXTS)))
    assert all(got[i] == word_ids(t) for i, t in enumerate(TEXTS))
    for batch in batches:
        assert all(v.dtype == np.int32 and v.shape[1] == 16 for v in batch.values())


def test_packing_stats_report_the_non_padding_share() -> None:
    source = _source()
    batches = drain(source, 4)
    tokens = sum(int((b["segment_ids"] > 0).sum()) for b in batches)
    rows = sum(len(b["tokens"]) for b in batches)
    stats = source.packing_stats()
    assert (stats["rows"], stats["tokens"], stats["documents"], stats["skipped"]) == (
        rows,
        tokens,
        len(TEXTS),
        0,
    )
    assert stats["efficiency"] == pytest.approx(tokens / (rows * 16))


@pytest.mark.parametrize("packing", ["first_fit", "concat"])
def test_source_state_resumes_at_every_batch(packing: str) -> None:
    reference = drain(_source(packing=packing), 3)
    for k in range(len(reference) + 1):
        source = _source(packing=packing)
        for _ in range(k):
            source.get_batch(3)
        state = json.loads(json.dumps(source.get_state()))  # JSON-able
        assert len(json.dumps(state)) < 1500  # references only, no tokens
        fresh = _source(packing=packing)
        fresh.set_state(state)
        _assert_same(drain(fresh, 3), reference[k:])


def test_state_names_the_pass_position() -> None:
    source = _source()
    source.get_batch(2)
    state = source.get_state()
    assert state["current_epoch"] == 0 and state["current_index"] == 2
    assert state["skipped"] == 0 and 0 < state["next_document"] < len(TEXTS)
    refs = [r for rows in state["packer"]["open"] + state["packer"]["ready"] for r in rows]
    assert all(d < state["next_document"] for d in refs[0::3])


def _pipeline(source: PackedTextSource, **kwargs) -> Pipeline:
    return Pipeline(source, batch_size=4, rngs=nnx.Rngs(0), **kwargs)


def test_pipeline_state_resumes_at_every_batch() -> None:
    reference = [dict(b) for b in _pipeline(_source())]
    assert len(reference) > 5
    for k in range(len(reference) + 1):
        pipeline = _pipeline(_source())
        iterator = iter(pipeline)
        for _ in range(k):
            next(iterator)
        state = json.loads(json.dumps(iterator.get_state()))
        fresh = _pipeline(_source())
        fresh.set_state(state)
        # a state taken after the last batch, its pass still open, is "nothing left":
        # the first pass after the restore is empty, the next is the next pass
        _assert_same(list(iter(fresh)), reference[k:])
    _assert_same(list(iter(fresh)), reference)  # same documents every pass


def test_pipeline_second_epoch_is_the_next_pass() -> None:
    def docs(epoch: int) -> list[str]:
        return make_texts(30, seed=10 + epoch)

    def build() -> Pipeline:
        return _pipeline(
            PackedTextSource(PackedTextConfig(seq_len=16, with_document_index=True), docs, word_ids)
        )

    pipeline = build()
    first, second = list(pipeline), list(pipeline)
    assert unpack(first) == {i: word_ids(t) for i, t in enumerate(docs(0))}
    assert unpack(second) == {i: word_ids(t) for i, t in enumerate(docs(1))}
    # resume inside epoch 1 after a state taken there
    p = build()
    list(p)
    it = iter(p)
    next(it), next(it)
    state = it.get_state()
    fresh = build()
    fresh.set_state(state)
    _assert_same(list(iter(fresh)), second[2:])


def test_direct_iteration_makes_num_epochs_passes() -> None:
    source = PackedTextSource(
        PackedTextConfig(seq_len=16, num_epochs=2, with_document_index=True),
        lambda epoch: TEXTS[:20],
        word_ids,
    )
    rows = list(source)
    one_pass = sum(len(b["tokens"]) for b in drain(_source(TEXTS[:20], open_rows=8), 100))
    assert len(rows) == 2 * one_pass
    assert rows[0]["tokens"].shape == (16,)


def test_shards_pack_disjoint_shares_that_cover_the_pass() -> None:
    seen: dict[int, list[int]] = {}
    for index in range(3):
        batches = list(_pipeline(_source(), shard_index=index, shard_count=3))
        docs = unpack(batches)
        assert all(d % 3 == index for d in docs)
        assert not set(docs) & set(seen)
        seen.update(docs)
    assert seen == {i: word_ids(t) for i, t in enumerate(TEXTS)}


def test_shard_resume_continues_its_own_share() -> None:
    reference = list(_pipeline(_source(), shard_index=1, shard_count=2))
    it = iter(_pipeline(_source(), shard_index=1, shard_count=2))
    next(it), next(it)
    fresh = _pipeline(_source(), shard_index=1, shard_count=2)
    fresh.set_state(it.get_state())
    _assert_same(list(iter(fresh)), reference[2:])


def test_element_spec_declares_int32_rows() -> None:
    spec = _source(with_document_index=False).element_spec()
    assert sorted(spec) == ["loss_mask", "positions", "segment_ids", "targets", "tokens"]
    assert all(s.shape == (16,) and s.dtype == np.int32 for s in spec.values())


# ------------------------------------------------------------------ bad documents
BAD = ["one two", "", "three", b"\xff\xfe bad", 7, "   ", b"four five"]
IDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def _bad_source(**config) -> PackedTextSource:
    return PackedTextSource(
        PackedTextConfig(seq_len=4, tokenize_block=2, with_document_index=True, **config),
        lambda epoch: BAD,
        lambda t: [IDS[w] for w in t.split()],
    )


def test_an_empty_document_raises_naming_it() -> None:
    with pytest.raises(RecordError) as err:
        drain(_bad_source(), 2)
    assert str(err.value) == (
        "PackedTextSource: document 1 of pass 0 is empty (no text). Fix or remove that "
        "document, or pass on_error='skip' to skip and count bad documents."
    )
    assert err.value.index == 1


@pytest.mark.parametrize(
    ("docs", "reason"),
    [
        ([b"ok", b"\xff\xfe bad"], "is not valid UTF-8 (invalid start byte at byte 0)"),
        (["ok", 7], "is int, not str or bytes"),
    ],
)
def test_invalid_utf8_and_non_text_raise_naming_the_document(docs, reason) -> None:
    source = PackedTextSource(PackedTextConfig(seq_len=4), lambda: docs, lambda t: [1])
    with pytest.raises(RecordError) as err:
        source.get_batch(1)
    assert str(err.value) == (
        f"PackedTextSource: document 1 of pass 0 {reason}. Fix or remove that document, "
        "or pass on_error='skip' to skip and count bad documents."
    )


def test_skip_counts_bad_documents_and_serves_the_rest() -> None:
    source = _bad_source(on_error="skip")
    got = unpack(drain(source, 2))
    assert got == {0: [1, 2], 2: [3], 6: [4, 5]}
    assert source.packing_stats()["skipped"] == 4
    assert [(r.index, r.cause) for r in source.skipped_documents()] == [
        (1, "document 1 of pass 0 is empty (no text)"),
        (3, "document 3 of pass 0 is not valid UTF-8 (invalid start byte at byte 0)"),
        (4, "document 4 of pass 0 is int, not str or bytes"),
        (5, "document 5 of pass 0 is blank (only whitespace, 3 characters: no text)"),
    ]


def test_skip_resume_keeps_the_count() -> None:
    source = _bad_source(on_error="skip")
    source.get_batch(1)
    state = source.get_state()
    fresh = _bad_source(on_error="skip")
    fresh.set_state(state)
    rest = drain(fresh, 1)
    assert fresh.get_state()["skipped"] == 4
    assert unpack([source.get_batch(1) for _ in range(len(rest))]) == unpack(rest)


def test_max_skipped_stops_the_pass() -> None:
    with pytest.raises(RecordError) as err:
        drain(_bad_source(on_error="skip", max_skipped=2), 2)
    assert str(err.value) == (
        "PackedTextSource: skipped 3 bad records in epoch 0, over the budget of 2 "
        "(max_skipped=2, max_skipped_fraction=None). Latest: record 4: document 4 of pass 0 "
        "is int, not str or bytes. Raise the skip budget or fix the data."
    )
    assert err.value.index == 4


def test_a_numpy_skip_budget_is_the_same_int() -> None:
    # PackedTextConfig(max_skipped=np.int64(2)) was refused ("must be None or an int")
    config = PackedTextConfig(on_error="skip", max_skipped=np.int64(2))
    assert (config.max_skipped, type(config.max_skipped)) == (2, int)
    with pytest.raises(RecordError, match=r"over the budget of 2 \(max_skipped=2,"):
        drain(_bad_source(on_error="skip", max_skipped=np.int64(2)), 2)


def test_a_document_of_no_tokens_is_empty() -> None:
    source = PackedTextSource(
        PackedTextConfig(seq_len=4), lambda: ["a", "b"], lambda t: [] if t == "b" else [1]
    )
    with pytest.raises(RecordError) as err:
        drain(source, 2)
    assert "document 1 of pass 0 is empty (it has no tokens)." in str(err.value)


# ------------------------------------------------------------------ config and state
def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        PackedTextConfig(packing="greedy")
    assert str(err.value) == (
        "PackedTextConfig.packing must be one of ['first_fit', 'best_fit', 'concat'], got 'greedy'."
    )
    with pytest.raises(ConfigError) as err:
        PackedTextConfig(on_error="skip-all")
    assert str(err.value) == (
        "PackedTextConfig: on_error must be one of ['raise', 'skip'], got 'skip-all'."
    )
    with pytest.raises(ConfigError) as err:
        PackedTextConfig(seq_len=0)
    assert str(err.value) == "PackedTextConfig.seq_len must be >= 1, got 0."


def test_documents_must_be_a_reader_or_a_function() -> None:
    with pytest.raises(ConfigError) as err:
        PackedTextSource(PackedTextConfig(), ["a", "b"], word_ids)
    assert str(err.value) == (
        "documents must be a reader (FunctionDocuments, JsonlDocuments, ParquetDocuments, "
        "HFStreamDocuments, MixedDocuments) or a function returning an iterable per pass, "
        "got list. Wrap a list as `lambda epoch: my_list`."
    )


def test_set_state_refuses_foreign_states() -> None:
    source = _source()
    source.get_batch(2)
    state = source.get_state()
    with pytest.raises(StateError) as err:
        _source().set_state({k: v for k, v in state.items() if k != "packer"})
    assert err.value.field == "packer"
    assert str(err.value).startswith("PackedTextSource state is missing 'packer'")
    tampered = dict(state, next_document=0)
    with pytest.raises(StateError) as err:
        _source().set_state(tampered)
    assert "which is not one of this shard's (0 of 1) documents before next_document=0" in str(
        err.value
    )
    short = {k: v for k, v in state.items() if k != "settings"}  # the snapshot decides
    fresh = PackedTextSource(
        PackedTextConfig(seq_len=16, open_rows=3, tokenize_block=7, with_document_index=True),
        lambda epoch: TEXTS[:1],
        word_ids,
    )
    with pytest.raises(StateError) as err:
        fresh.set_state(short)
    assert str(err.value) == (
        f"PackedTextSource: the restored position says {state['next_document']} documents of "
        "pass 0 were read, but the pass ends after 1; the state comes from other documents."
    )


def test_function_documents_with_and_without_epoch() -> None:
    assert list(FunctionDocuments(lambda: ["x"]).read(3, 0)) == ["x"]
    assert list(FunctionDocuments(lambda e: [str(e)]).read(3, 0)) == ["3"]
    with pytest.raises(ConfigError) as err:
        list(FunctionDocuments(lambda: "abc").read(0, 0))
    assert str(err.value) == (
        "FunctionDocuments: the function returned str; it must return an iterable of "
        "documents (e.g. a list of str or a generator)."
    )


def test_restart_begins_the_given_pass() -> None:
    def docs(epoch: int) -> list[str]:
        return make_texts(12, seed=20 + epoch)

    config = PackedTextConfig(seq_len=16, with_document_index=True)
    source = PackedTextSource(config, docs, word_ids)
    source.get_batch(2)
    source.restart(3)
    assert source.get_state()["current_epoch"] == 3
    assert unpack(drain(source, 2)) == {i: word_ids(t) for i, t in enumerate(docs(3))}


def test_close_epoch_mid_pass_keeps_the_position() -> None:
    reference = drain(_source(), 3)
    source = _source()
    first = [source.get_batch(3) for _ in range(2)]
    state = source.get_state()
    source.close_epoch()  # releases the reader; the position is re-derived on the next read
    assert source.get_state() == state
    _assert_same(first + drain(source, 3), reference)


def test_a_position_alone_restores_by_repacking_the_pass() -> None:
    reference = drain(_source(), 3)
    for k in (1, 4, len(reference) - 1):
        fresh = _source()
        fresh.set_state({"current_epoch": 0, "current_index": 3 * k})  # no packer snapshot
        _assert_same(drain(fresh, 3), reference[k:])
        seeked = _source()
        seeked.seek(0, 3 * k)
        _assert_same(drain(seeked, 3), reference[k:])


def test_nnx_update_of_the_pipeline_state_continues_exactly() -> None:
    reference = list(_pipeline(_source()))
    old = _pipeline(_source())
    iterator = iter(old)
    for _ in range(3):
        next(iterator)
    fresh = _pipeline(_source())
    nnx.update(fresh, nnx.state(old))
    _assert_same(list(iter(fresh)), reference[3:])


def test_nnx_update_of_another_process_count_is_refused() -> None:
    """Rows are packed from the process's own documents: a position of 2 processes
    restored into 1 would pack other rows and pass some documents twice."""
    old = _pipeline(_source(), shard_index=0, shard_count=2)
    iterator = iter(old)
    next(iterator)
    fresh = _pipeline(_source(), shard_index=0, shard_count=1)
    nnx.update(fresh, nnx.state(old))
    with pytest.raises(StateError, match="position restored .*shard='0 of 1'"):
        next(iter(fresh))


def test_a_position_past_the_pass_is_refused() -> None:
    rows = sum(len(b["tokens"]) for b in drain(_source(), 8))
    with pytest.raises(StateError) as err:
        _source().set_state({"current_epoch": 0, "current_index": rows + 5})
    assert str(err.value) == (
        f"PackedTextSource: the restored position says {rows + 5} rows of pass 0 were "
        f"handed out, but the pass ends after {rows}; the state comes from other "
        "documents or settings."
    )


def test_peek_does_not_move_the_position() -> None:
    reference = list(_pipeline(_source()))
    pipeline = _pipeline(_source())
    _assert_same([pipeline.peek()], reference[:1])
    _assert_same(list(pipeline), reference)
    _assert_same(list(pipeline), reference)  # a finished pass: the next one


def test_packing_stats_survive_the_end_of_a_pipeline_loop() -> None:
    pipeline = _pipeline(_source())
    for i, _batch in enumerate(pipeline):
        if i == 2:
            break  # the dropped iterator releases the reader
    stats = pipeline.source.packing_stats()
    assert stats["rows"] == 12 and 0 < stats["documents"] < len(TEXTS)
    assert stats["efficiency"] == pytest.approx(stats["tokens"] / (12 * 16))


def test_reentering_after_break_starts_the_next_pass() -> None:
    def docs(epoch: int) -> list[str]:
        return make_texts(30, seed=40 + epoch)

    def build() -> Pipeline:
        config = PackedTextConfig(seq_len=16, with_document_index=True)
        return _pipeline(PackedTextSource(config, docs, word_ids))

    pipeline = build()
    for i, _batch in enumerate(pipeline):
        if i == 1:
            break
    assert unpack(list(pipeline)) == {i: word_ids(t) for i, t in enumerate(docs(1))}


@pytest.mark.parametrize("packing", ["first_fit", "best_fit", "concat"])
def test_state_saved_inside_a_long_document_is_small_and_resumes_to_the_token(
    packing: str,
) -> None:
    # A document of 20,000 tokens cut into 2,500 rows of 8: saved after 10 rows, the state
    # holds the rows still to serve as one run of references, not one entry per row.
    docs = ["1 2 3", " ".join(str(i) for i in range(10, 20_010)), "4 5 6 7", "8 9"]

    def build() -> PackedTextSource:
        config = PackedTextConfig(seq_len=8, packing=packing, open_rows=2)
        return PackedTextSource(config, lambda: docs, word_ids)

    reference = np.concatenate([b["tokens"] for b in drain(build(), 64)])
    source = build()
    source.get_batch(4)
    source.get_batch(6)
    saved = json.dumps(source.get_state())
    assert len(saved) < 1000, saved[:300]
    fresh = build()
    fresh.set_state(json.loads(saved))
    rest = np.concatenate([b["tokens"] for b in drain(fresh, 64)])
    np.testing.assert_array_equal(rest, reference[10:])
    served = np.concatenate([reference[:10], rest])
    assert sorted(served[served != 0].tolist()) == sorted(
        [1, 2, 3, *range(10, 20_010), 4, 5, 6, 7, 8, 9]
    )


def test_packing_stats_after_a_seek_count_the_rows_before_it() -> None:
    # A seek moves the position only; the stats of the pass so far are those of a source
    # that read up to that row, not the zeros of an unread pass.
    read = _source()
    for _ in range(4):
        read.get_batch(3)
    expected = read.packing_stats()
    assert expected["rows"] == 12 and expected["tokens"] > 0
    sought = _source()
    sought.seek(0, 12)
    assert sought.packing_stats() == expected
    _assert_same(drain(sought, 3), drain(read, 3))


def test_a_pass_with_no_documents_is_an_error_not_an_empty_loop() -> None:
    endless = PackedTextSource(PackedTextConfig(seq_len=8, num_epochs=-1), lambda: [], word_ids)
    with pytest.raises(RecordError, match="pass 0 holds no documents: the reader "
                                          r"\(FunctionDocuments\) gave none"):
        next(iter(Pipeline(endless, batch_size=2, rngs=nnx.Rngs(0))))
    few = PackedTextSource(PackedTextConfig(seq_len=8), lambda: ["1 2", "3"], word_ids)
    with pytest.raises(RecordError, match=r"pass 0 holds 2 documents, none for this process "
                                          r"\(shard 2 of 3 packs documents 2, 2 \+ 3, ...\)"):
        next(iter(Pipeline(few, batch_size=2, rngs=nnx.Rngs(0), shard_index=2, shard_count=3)))


def test_a_state_holding_numpy_ints_restores_as_one_of_python_ints() -> None:
    reference = [dict(b) for b in _pipeline(_source())]
    pipeline = _pipeline(_source())
    iterator = iter(pipeline)
    for _ in range(3):
        next(iterator)
    for state, restore in ((iterator.get_state(), "pipeline"),
                           (pipeline.source.get_state(), "source")):
        assert isinstance(state.get("next_document", state.get("source", {}).get(
            "next_document")), int)
        fresh = _pipeline(_source())
        target = fresh if restore == "pipeline" else fresh.source
        target.set_state(with_numpy_ints(state))
        _assert_same(list(iter(fresh)), reference[3:])
        json.dumps(fresh.get_state())  # what it saves next is plain JSON again
