"""What a language-model user hands ``PackedTextSource`` as documents: a datarax source
(read through ``HFStreamDocuments``) and records where text is expected."""

from __future__ import annotations

import numpy as np
import pytest
from text_helpers import drain, make_texts, unpack, word_ids

from datarax.core.errors import ConfigError, RecordError
from datarax.sources import MemorySource, MemorySourceConfig, ShuffleBufferSource
from datarax.text import HFStreamDocuments, PackedTextConfig, PackedTextSource

TEXTS = make_texts(30, seed=2, high=20)


def _records() -> MemorySource:
    return MemorySource(MemorySourceConfig(), {"text": list(TEXTS),
                                               "n": np.arange(len(TEXTS), dtype=np.int32)})


_HINT = ("read the text field of a source read forward (a Hugging Face stream, ArrayRecord, "
         "a MixSource ...) with HFStreamDocuments(source, field='text'); an indexed source (in "
         "memory, HFEagerSource) is read forward wrapped as ShuffleBufferSource(source, "
         "buffer_size=1) (its own order); texts in a list: pass `lambda epoch: texts`.")


def test_a_datarax_source_as_documents_is_refused_naming_the_reader_that_reads_it() -> None:
    with pytest.raises(ConfigError) as err:
        PackedTextSource(PackedTextConfig(seq_len=8), _records(), word_ids)
    assert str(err.value) == (
        f"documents is a datarax source (MemorySource), not a reader of documents: {_HINT}")
    with pytest.raises(ConfigError) as err:
        HFStreamDocuments(_records(), field="text")  # indexed: not read forward
    assert str(err.value) == (
        "HFStreamDocuments reads a source forward (seek, get_batch_with_indices), which "
        f"MemorySource does not: {_HINT}")


def test_the_text_field_of_any_source_packs_every_document_once_and_resumes() -> None:
    def build(shuffled: bool) -> PackedTextSource:  # a buffer of 1: the source's order
        records = ShuffleBufferSource(_records(), buffer_size=7 if shuffled else 1, seed=1)
        config = PackedTextConfig(seq_len=12, open_rows=2, tokenize_block=4,
                                  with_document_index=True)
        return PackedTextSource(config, HFStreamDocuments(records, field="text"), word_ids)

    assert unpack(drain(build(False), 3)) == {i: word_ids(t) for i, t in enumerate(TEXTS)}
    reference = drain(build(True), 3)
    served = sorted(unpack(reference).values())
    assert served == sorted(word_ids(t) for t in TEXTS)  # a shuffled order, each once
    source = build(True)
    for _ in range(4):
        source.get_batch(3)
    resumed = build(True)
    resumed.set_state(source.get_state())
    assert [b["tokens"].tolist() for b in drain(resumed, 3)] == [
        b["tokens"].tolist() for b in reference[4:]]


def test_a_function_yielding_records_is_told_to_yield_their_text() -> None:
    records = [{"text": "1 2", "id": 0}, {"text": "3", "id": 1}]
    source = PackedTextSource(PackedTextConfig(seq_len=4), lambda epoch: records, word_ids)
    with pytest.raises(RecordError) as err:
        source.get_batch(1)
    assert str(err.value) == (
        "PackedTextSource: document 0 of pass 0 is a dict (keys ['id', 'text']), not str or "
        "bytes: the reader must yield each document's text, e.g. (record['text'] for record "
        "in records). Fix or remove that document, or pass on_error='skip' to skip and count "
        "bad documents."
    )


def test_a_field_that_is_not_one_text_per_record_is_refused_at_construction() -> None:
    numbers = ShuffleBufferSource(_records(), buffer_size=1)
    with pytest.raises(ConfigError) as err:
        HFStreamDocuments(numbers, field="n")
    assert str(err.value) == (
        "HFStreamDocuments: the field 'n' holds int32(), not one text per record (fields: "
        "{'n': 'int32()', 'text': 'text()'}); pass field= naming the text field."
    )
    pairs = MemorySource(MemorySourceConfig(), {"text": np.asarray([["a", "b"]] * 3)})
    with pytest.raises(ConfigError, match=r"the field 'text' holds text\(2,\), not one text"):
        HFStreamDocuments(ShuffleBufferSource(pairs, buffer_size=1), field="text")


def test_a_parquet_column_that_is_not_text_is_refused_naming_the_text_columns(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from datarax.text import ParquetDocuments

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"n": [1, 2], "body": pa.array(["a b", "c"]).dictionary_encode(),
                             "raw": pa.array([b"d", b"e f"]), "tags": [["x"], ["y"]]}), path)
    for column, kind in (("n", "int64"), ("tags", "list<element: string>")):
        with pytest.raises(ConfigError) as err:
            ParquetDocuments(str(path), column=column)
        assert str(err.value) == (
            f"ParquetDocuments: {path} column '{column}' holds {kind}, not text (its text "
            "columns: ['body', 'raw']); pass column= naming the text column."
        )
    for column, texts in (("body", ["a b", "c"]), ("raw", [b"d", b"e f"])):  # dictionary, binary
        assert list(ParquetDocuments(str(path), column=column).read(0, 0)) == texts


def test_a_mixture_corpus_that_is_not_a_reader_is_refused_naming_the_corpus() -> None:
    from datarax.text import MixedDocuments

    with pytest.raises(ConfigError) as err:
        MixedDocuments({"web": lambda: ["a"], "books": ["b"]}, {"web": 1, "books": 1},
                       documents_per_epoch=4)
    assert str(err.value).startswith(
        "MixedDocuments corpus 'books' must be a reader (FunctionDocuments, JsonlDocuments, "
        "ParquetDocuments, HFStreamDocuments, MixedDocuments) or a function returning an "
        "iterable per pass, got list.")
    with pytest.raises(ConfigError) as err:
        MixedDocuments({"web": lambda: ["a"], "books": _records()}, {"web": 1, "books": 1},
                       documents_per_epoch=4)
    assert str(err.value) == (
        "MixedDocuments corpus 'books' is a datarax source (MemorySource), not a reader of "
        f"documents: {_HINT}")


def test_a_special_token_given_as_its_text_is_told_to_pass_its_id() -> None:
    from datarax.text import TextTokenizer

    with pytest.raises(ConfigError) as err:
        TextTokenizer(word_ids, bos_id="[BOS]")
    assert str(err.value) == (
        "TextTokenizer bos_id must be None or an int id >= 0, got '[BOS]' (a token; pass its "
        "id: tokenizer.token_to_id('[BOS]'))."
    )
    with pytest.raises(ConfigError, match=r"^TextTokenizer eos_id must be None or an int id >= "
                                          r"0, got -1\.$"):
        TextTokenizer(word_ids, eos_id=-1)
