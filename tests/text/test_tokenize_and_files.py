"""TextTokenizer (Hugging Face tokenizers built here, custom callables) and file readers."""

from __future__ import annotations

import gzip
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flax import nnx
from text_helpers import drain, make_texts, unpack, word_ids

from datarax.core.errors import ConfigError, RecordError
from datarax.core.extras import MissingExtraError
from datarax.pipeline import Pipeline
from datarax.text import (
    JsonlDocuments,
    PackedTextConfig,
    PackedTextSource,
    ParquetDocuments,
    TextTokenizer,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine",
    "all that glitters is not gold",
    "the early bird catches the worm",
] * 5


@pytest.fixture(scope="module")
def hf_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def test_hf_tokenizer_ids_with_bos_eos_as_int32(hf_tokenizer) -> None:
    tok = TextTokenizer(hf_tokenizer, bos_id=2, eos_id=3)
    got = tok.encode_batch(CORPUS[:4])
    for text, ids in zip(CORPUS, got):
        assert ids.dtype == np.int32
        assert ids.tolist() == [2] + hf_tokenizer.encode(text, add_special_tokens=False).ids + [3]


def test_a_special_id_past_the_vocabulary_is_refused(hf_tokenizer) -> None:
    """An id the tokenizer does not have has no row in a model's embedding table."""
    size = hf_tokenizer.get_vocab_size()
    with pytest.raises(ConfigError) as err:
        TextTokenizer(hf_tokenizer, bos_id=2, eos_id=size)
    assert str(err.value) == (
        f"TextTokenizer eos_id={size} is not an id of the tokenizer (its vocabulary holds ids "
        f"0..{size - 1}), so a model's embedding table has no row for it. Add the token to the "
        "tokenizer (tokenizer.add_special_tokens(['[BOS]'])) and pass its id "
        "(tokenizer.token_to_id('[BOS]')).")
    assert TextTokenizer(hf_tokenizer, eos_id=size - 1).encode("the")[-1] == size - 1
    assert TextTokenizer(word_ids, bos_id=10**6).encode("7").tolist() == [10**6, 7]  # no vocab


def test_a_pad_id_past_int32_is_refused_when_configured() -> None:
    with pytest.raises(ConfigError) as err:
        PackedTextConfig(seq_len=8, pad_id=2**31)
    assert str(err.value) == (
        "PackedTextConfig.pad_id must fit int32 (the rows are int32), got 2147483648.")


def test_tokenizer_json_path_and_truncation_keeping_eos(hf_tokenizer, tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    hf_tokenizer.save(str(path))
    tok = TextTokenizer(str(path), eos_id=3, max_tokens=4)
    plain = hf_tokenizer.encode(CORPUS[0], add_special_tokens=False).ids
    assert len(plain) > 3
    assert tok.encode(CORPUS[0]).tolist() == plain[:3] + [3]


def test_packed_source_with_a_trained_tokenizer_unpacks_to_its_encodings(hf_tokenizer) -> None:
    tok = TextTokenizer(hf_tokenizer, bos_id=2, eos_id=3)
    source = PackedTextSource(
        PackedTextConfig(seq_len=12, with_document_index=True, tokenize_block=3),
        lambda: CORPUS,
        tok,
    )
    got = unpack(drain(source, 4))
    assert got == {i: tok.encode(t).tolist() for i, t in enumerate(CORPUS)}


def test_custom_tokenizer_must_return_int_ids() -> None:
    source = PackedTextSource(
        PackedTextConfig(seq_len=8), lambda: ["a", "b c"], lambda t: [0.5] if " " in t else [1]
    )
    with pytest.raises(RecordError) as err:
        source.get_batch(1)
    assert str(err.value) == (
        "TextTokenizer: the tokenizer function returned list with dtype float64 and shape "
        "(1,) for document 1 of pass 0; it must return a flat sequence of int ids."
    )
    too_big = TextTokenizer(lambda t: [2**40])
    with pytest.raises(RecordError) as err:
        too_big.encode("x")
    assert str(err.value) == (
        "TextTokenizer: the tokenizer function returned ids outside [0, 2147483647] for "
        "document 0 of the block (min 1099511627776, max 1099511627776); token ids must be "
        ">= 0 (an embedding row) and fit int32 (the rows' dtype)."
    )
    with pytest.raises(RecordError, match=r"\(min -1, max 5\); token ids must be >= 0"):
        TextTokenizer(lambda t: [5, -1]).encode("x")


def test_tokenizer_settings_are_checked() -> None:
    with pytest.raises(ConfigError) as err:
        TextTokenizer(word_ids, bos_id=1, eos_id=2, max_tokens=2)
    assert str(err.value) == (
        "TextTokenizer max_tokens must be None or an int > 2 (the BOS/EOS ids it must hold "
        "plus one), got 2."
    )
    with pytest.raises(ConfigError) as err:
        TextTokenizer(42)
    assert str(err.value) == (
        "TextTokenizer needs a tokenizers.Tokenizer, a path to a tokenizer.json or a "
        "callable str -> list of ints, got int."
    )


def test_missing_tokenizers_extra_names_the_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtraError) as err:
        TextTokenizer(str(tmp_path / "tokenizer.json"))
    assert str(err.value) == (
        "TextTokenizer needs the optional package 'tokenizers', which is not installed. "
        'Install it with: pip install "datarax[tokenizers]"'
    )


# ------------------------------------------------------------------------ files
def _write_jsonl(path, texts) -> None:
    path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))


def test_jsonl_and_parquet_sources_resume_exactly(tmp_path) -> None:
    texts = make_texts(60, seed=5, high=30)
    _write_jsonl(tmp_path / "a.jsonl", texts[:25])
    _write_jsonl(tmp_path / "b.jsonl", texts[25:])
    pq.write_table(pa.table({"text": texts}), tmp_path / "c.parquet", row_group_size=7)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress((tmp_path / "b.jsonl").read_bytes()))
    readers = {
        "jsonl": lambda: JsonlDocuments([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]),
        "parquet": lambda: ParquetDocuments(tmp_path / "c.parquet"),
        "gzip": lambda: JsonlDocuments([tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"]),
    }
    for name, reader in readers.items():
        assert list(reader().read(0, 0)) == texts, name
        assert list(reader().read(0, 31)) == texts[31:], name
        config = PackedTextConfig(
            seq_len=16, open_rows=2, tokenize_block=4, with_document_index=True
        )
        reference = drain(PackedTextSource(config, reader(), word_ids), 2)
        assert unpack(reference) == {i: word_ids(t) for i, t in enumerate(texts)}
        for k in (1, 5, len(reference) - 1):
            source = PackedTextSource(config, reader(), word_ids)
            for _ in range(k):
                source.get_batch(2)
            fresh = PackedTextSource(config, reader(), word_ids)
            fresh.set_state(source.get_state())
            rest = drain(fresh, 2)
            assert [b["tokens"].tolist() for b in rest] == [
                b["tokens"].tolist() for b in reference[k:]
            ]


def test_a_gzip_jsonl_file_names_its_lines_and_a_cut_one_is_an_error(tmp_path) -> None:
    lines = b'{"text": "1 2"}\n\n{"text": 3}\n' + b'{"text": "4"}\n' * 2000
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(lines))
    source = PackedTextSource(PackedTextConfig(seq_len=4, on_error="skip"),
                              JsonlDocuments(tmp_path / "a.jsonl.gz"), word_ids)
    assert drain(source, 1)[0]["tokens"].tolist() == [[1, 2, 4, 4]]
    assert [r.cause for r in source.skipped_documents()] == [
        f"{tmp_path / 'a.jsonl.gz'} line 3 field 'text' holds int, not a string"]
    whole = gzip.compress(lines)
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(RecordError, match=r"cut.jsonl.gz is not a whole gzip file after line "
                                          r"\d+ \(.*\); it is truncated or corrupt"):
        PackedTextSource(PackedTextConfig(seq_len=4), JsonlDocuments(tmp_path / "cut.jsonl.gz"),
                         word_ids).get_batch(1)


def test_bad_jsonl_lines_name_file_and_line(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"text": "1 2"}\n{"text": 3}\nnot json\n{"body": "x"}\n{"text": "\xff"}\n{"text": "4"}\n'
    )
    with pytest.raises(RecordError) as err:
        drain(PackedTextSource(PackedTextConfig(seq_len=4), JsonlDocuments(path), word_ids), 2)
    assert str(err.value) == (
        f"PackedTextSource: {path} line 2 field 'text' holds int, not a string. Fix or "
        "remove that document, or pass on_error='skip' to skip and count bad documents."
    )
    source = PackedTextSource(
        PackedTextConfig(seq_len=4, on_error="skip"), JsonlDocuments(path), word_ids
    )
    drain(source, 2)
    assert [r.cause for r in source.skipped_documents()] == [
        f"{path} line 2 field 'text' holds int, not a string",
        f"{path} line 3 is not valid JSON (Expecting value at column 1)",
        f"{path} line 4 has no field 'text' (found ['body'])",
        f"{path} line 5 is not valid UTF-8 (invalid start byte at byte 10)",
    ]
    assert source.packing_stats()["documents"] == 2


def test_a_jsonl_line_with_a_lone_surrogate_is_a_bad_document_not_a_crash(tmp_path) -> None:
    # JSON may escape half a surrogate pair ("\\ud800"): json gives a str that has no UTF-8
    # form, which no tokenizer can encode.
    path = tmp_path / "scraped.jsonl"
    path.write_text('{"text": "1 2"}\n{"text": "3 \\ud800 4"}\n{"text": "5"}\n')
    with pytest.raises(RecordError) as err:
        drain(PackedTextSource(PackedTextConfig(seq_len=4), JsonlDocuments(path), word_ids), 2)
    cause = (
        f"{path} line 2 holds a lone surrogate (U+D800 at character 2), "
        "which is not valid Unicode text"
    )
    assert str(err.value) == (
        f"PackedTextSource: {cause}. Fix or remove that document, or pass on_error='skip' "
        "to skip and count bad documents."
    )
    source = PackedTextSource(
        PackedTextConfig(seq_len=4, on_error="skip"), JsonlDocuments(path), word_ids
    )
    rows = drain(source, 2)
    assert [r.cause for r in source.skipped_documents()] == [cause]
    assert sorted(t for b in rows for t in b["tokens"].ravel().tolist() if t) == [1, 2, 5]


def test_a_bad_jsonl_line_is_named_by_its_line_number_with_blank_lines_before_it(tmp_path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text('\n{"text": "1 2"}\n\n\n{"body": "x"}\n')
    second.write_text('{"text": "3"}\n\n{"text": 4}\n\n')
    source = PackedTextSource(
        PackedTextConfig(seq_len=4, on_error="skip"), JsonlDocuments([first, second]), word_ids
    )
    drain(source, 2)
    assert [r.cause for r in source.skipped_documents()] == [
        f"{first} line 5 has no field 'text' (found ['body'])",
        f"{second} line 3 field 'text' holds int, not a string",
    ]


def test_local_glob_patterns_name_their_files_sorted(tmp_path) -> None:
    for name, words in (("b.jsonl", "3 4"), ("a.jsonl", "1 2")):
        (tmp_path / name).write_text(json.dumps({"text": words}) + "\n")
    docs = JsonlDocuments(str(tmp_path / "*.jsonl"))
    assert docs.paths == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert list(docs.read(0, 0)) == ["1 2", "3 4"]
    with pytest.raises(RecordError) as err:
        ParquetDocuments(str(tmp_path / "*.parquet"))
    assert str(err.value) == (
        f"ParquetDocuments: the glob pattern '{tmp_path / '*.parquet'}' matches no files. "
        "Check the directory and the pattern."
    )



def test_a_double_star_pattern_reads_every_folder_below_as_a_urls_does(tmp_path) -> None:
    for name, words in (("b.jsonl", "5"), ("sub/a.jsonl", "3 4"), ("sub/deeper/c.jsonl", "1 2")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps({"text": words}) + "\n")
    docs = JsonlDocuments(str(tmp_path / "**" / "*.jsonl"))
    names = ("b.jsonl", "sub/a.jsonl", "sub/deeper/c.jsonl")
    assert docs.paths == [str(tmp_path / n) for n in names]
    assert list(docs.read(0, 0)) == ["5", "3 4", "1 2"]

def test_a_missing_or_broken_tokenizer_file_is_named(tmp_path) -> None:
    missing = tmp_path / "tokenizer.json"
    with pytest.raises(ConfigError) as err:
        TextTokenizer(missing)
    assert str(err.value) == (
        f"TextTokenizer: the tokenizer file {str(missing)!r} does not exist or is not a file. "
        "Pass the path of a tokenizer.json (Tokenizer.save writes one)."
    )
    missing.write_text("not json")
    with pytest.raises(ConfigError, match=f"TextTokenizer: cannot load the tokenizer file {str(missing)!r}: "):
        TextTokenizer(missing)


def test_parquet_missing_column_is_named(tmp_path) -> None:
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(ConfigError) as err:
        ParquetDocuments(tmp_path / "c.parquet")
    assert str(err.value) == (
        f"ParquetDocuments: {tmp_path / 'c.parquet'} has no column 'text' (columns: ['body']); "
        "pass column= naming the text column."
    )


def _hf_stream_on_the_source_contract(folder) -> bool:
    """Whether HFStreamingSource serves seek + get_batch_with_indices (the sources
    rebuild on main ports it; until then the HF reader cannot be exercised)."""
    from datarax.sources import HFStreamingConfig, HFStreamingSource

    _write_jsonl(folder / "probe.jsonl", ["a"])
    stream = HFStreamingSource(HFStreamingConfig(data_files=str(folder / "probe.jsonl")))
    try:
        stream.seek(0, 0)
        stream.get_batch_with_indices(1)
    except AttributeError:
        return False
    return True


def test_hf_streaming_source_text_field_packs_and_resumes(tmp_path) -> None:
    from datarax.sources import HFStreamingConfig, HFStreamingSource
    from datarax.text import HFStreamDocuments

    if not _hf_stream_on_the_source_contract(tmp_path):
        pytest.skip("HFStreamingSource is not yet ported to the seek/position contract")
    texts = make_texts(40, seed=6, high=20)
    _write_jsonl(tmp_path / "c.jsonl", texts)

    def build() -> PackedTextSource:
        stream = HFStreamingSource(
            HFStreamingConfig(data_files=str(tmp_path / "c.jsonl"), chunk_size=9)
        )
        config = PackedTextConfig(
            seq_len=12, open_rows=2, tokenize_block=5, with_document_index=True
        )
        return PackedTextSource(config, HFStreamDocuments(stream, field="text"), word_ids)

    reference = drain(build(), 2)
    assert unpack(reference) == {i: word_ids(t) for i, t in enumerate(texts)}
    source = build()
    for _ in range(3):
        source.get_batch(2)
    fresh = build()
    fresh.set_state(source.get_state())
    assert [b["tokens"].tolist() for b in drain(fresh, 2)] == [
        b["tokens"].tolist() for b in reference[3:]
    ]
    with pytest.raises(ConfigError) as err:
        HFStreamDocuments(
            HFStreamingSource(HFStreamingConfig(data_files=str(tmp_path / "c.jsonl"))), field="body"
        )
    assert str(err.value) == (
        "HFStreamDocuments: the stream has no field 'body' (fields: ['id', 'text']); pass "
        "field= naming the text field."
    )


def test_documents_paths_that_are_not_paths_are_refused_naming_the_argument() -> None:
    with pytest.raises(ConfigError) as err:
        JsonlDocuments(["a.jsonl", 3])
    assert str(err.value) == ("JsonlDocuments paths must be a path, a glob pattern or a list of "
                              "them (str or os.PathLike), got int 3.")
    with pytest.raises(ConfigError, match=r"^ParquetDocuments paths is an empty list; name at "
                                          r"least one file\.$"):
        ParquetDocuments([])


def test_a_folder_given_as_a_documents_path_is_named_a_folder(tmp_path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n')
    for reader in (JsonlDocuments, ParquetDocuments):
        with pytest.raises(RecordError) as err:
            reader(str(tmp_path))
        assert str(err.value) == (
            f"{reader.__name__}: the path '{tmp_path}' is a directory, not a file. Name its "
            f"files, or a glob pattern such as '{tmp_path / '*'}'.")
        assert err.value.path == str(tmp_path)


def test_a_bad_document_after_records_the_stream_skipped_is_named_by_its_record(
        tmp_path) -> None:
    """The stream drops records it cannot convert (a missing text); a bad document after
    them is named by its record in the stream, not by how many documents came before."""
    from hf_files import write_jsonl

    from datarax.sources import HFStreamingConfig, HFStreamingSource
    from datarax.text import HFStreamDocuments

    texts = [None, "1 2", None, None, "3", "", "4 5", None, "", "6"]
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts])
    stream = HFStreamingSource(HFStreamingConfig(data_files=path, chunk_size=3, on_error="skip"))
    source = PackedTextSource(PackedTextConfig(seq_len=4, on_error="skip"),
                              HFStreamDocuments(stream, field="text"), word_ids)
    assert [b["tokens"].tolist() for b in drain(source, 2)] == [[[1, 2, 3, 6], [4, 5, 0, 0]]]
    assert [r.cause for r in source.skipped_documents()] == [
        f"record {i} of pass 0 of the stream's field 'text' is empty (no text)" for i in (5, 8)]
    raising = PackedTextSource(PackedTextConfig(seq_len=4),
                               HFStreamDocuments(stream, field="text"), word_ids)
    with pytest.raises(RecordError, match="record 5 of pass 0 of the stream's field 'text' is "
                                          "empty"):
        drain(raising, 2)


def test_a_bad_document_of_a_mixture_is_named_by_its_source_and_draw(tmp_path) -> None:
    """A MixSource's stable index is draw * sources + source, not a position: a bad
    document is named as MixSource.locate names its record."""
    from hf_files import write_jsonl

    from datarax.mixing import MixSource
    from datarax.sources import HFStreamingConfig, HFStreamingSource
    from datarax.text import HFStreamDocuments

    def stream(name: str, texts: list[str]) -> HFStreamingSource:
        path = write_jsonl(tmp_path / f"{name}.jsonl", [{"text": t} for t in texts])
        return HFStreamingSource(HFStreamingConfig(data_files=path))

    mix = MixSource({"a": stream("a", ["1 2", "3", "4", "5"]),
                     "b": stream("b", ["7", "", "8", "9"])}, {"a": 1, "b": 1},
                    records_per_epoch=8)
    source = PackedTextSource(PackedTextConfig(seq_len=4), HFStreamDocuments(mix, field="text"),
                              word_ids)
    with pytest.raises(RecordError) as err:
        drain(source, 2)
    assert mix.locate(2, 0) == ("b", 1)  # the empty text: b's second record, served third
    assert str(err.value).startswith(
        "PackedTextSource: draw 1 of MixSource source 'b' (record 2 of pass 0 of the mixture), "
        "its field 'text' is empty (no text).")


def test_a_pass_whose_every_document_is_bad_is_an_error_even_with_skip(tmp_path) -> None:
    # A misspelt field skips every line: a loop that counts steps would wait forever for a
    # batch. Skipping passes over bad documents among good ones, not over a whole pass.
    path = tmp_path / "web.jsonl"
    path.write_text('{"text": "1 2"}\n{"text": "3"}\n')
    config = PackedTextConfig(seq_len=4, on_error="skip")
    expected = (
        "PackedTextSource: every document of pass 0 was bad: 2 skipped and none packed (the "
        f"last: {path} line 2 has no field 'body' (found ['text'])). Check the reader's field "
        "or column and the documents; on_error='skip' passes over bad documents among good ones."
    )
    for prefetch in (0, 2):
        source = PackedTextSource(config, JsonlDocuments(path, field="body"), word_ids)
        pipeline = Pipeline(source, batch_size=2, rngs=nnx.Rngs(0), prefetch=prefetch)
        with pytest.raises(RecordError) as err:
            list(pipeline)
        assert str(err.value) == expected
    mixed = ["", "1 2", "", "3"]  # some bad among good ones: skipped as before
    source = PackedTextSource(config, lambda: mixed, word_ids)
    assert [r.tolist() for r in drain(source, 2)[0]["tokens"]] == [[1, 2, 3, 0]]
    assert source.packing_stats()["skipped"] == 2


def test_a_tokenizer_that_pads_gives_each_document_its_own_ids_and_is_left_untouched(
    hf_tokenizer, tmp_path
) -> None:
    # Padding to the longest document of a block would pack pad ids as tokens.
    from tokenizers import Tokenizer

    padded = Tokenizer.from_str(hf_tokenizer.to_str())
    padded.enable_padding(pad_id=0, pad_token="[PAD]")
    plain = [hf_tokenizer.encode(t, add_special_tokens=False).ids for t in CORPUS[:3]]
    path = tmp_path / "padded.json"
    padded.save(str(path))
    for given in (padded, str(path)):
        got = TextTokenizer(given, eos_id=3).encode_batch(["the dog", *CORPUS[:3]])[1:]
        assert [ids.tolist() for ids in got] == [ids + [3] for ids in plain]
    assert padded.padding is not None  # the caller's tokenizer keeps its own setting


def test_a_tokenizer_that_truncates_is_refused_naming_its_length(hf_tokenizer, tmp_path) -> None:
    from tokenizers import Tokenizer

    cutting = Tokenizer.from_str(hf_tokenizer.to_str())
    cutting.enable_truncation(max_length=5)
    with pytest.raises(ConfigError, match="truncates every document to 5 tokens.*max_tokens="):
        TextTokenizer(cutting)
    path = tmp_path / "cutting.json"
    cutting.save(str(path))
    with pytest.raises(ConfigError, match=r"tokenizer file .*cutting.json' truncates"):
        TextTokenizer(str(path))


def test_a_tokenizer_that_raises_is_a_record_error_naming_the_document() -> None:
    vocab = {"the": 1, "cat": 2}
    source = PackedTextSource(PackedTextConfig(seq_len=8, on_error="skip"),
                              lambda: ["the cat", "the dog"], lambda t: [vocab[w] for w in t.split()])
    with pytest.raises(RecordError) as err:
        source.get_batch(1)
    assert str(err.value) == (
        "TextTokenizer: the tokenizer function raised KeyError ('dog') on document 1 of "
        "pass 0; fix the tokenizer, or the document."
    )
    assert isinstance(err.value.__cause__, KeyError)


def test_a_documents_function_of_two_arguments_is_refused_at_construction() -> None:
    def two(epoch, shard):
        return ["a"]

    with pytest.raises(ConfigError, match=r"function .*two needs 2 arguments \(epoch, shard\)"):
        PackedTextSource(PackedTextConfig(seq_len=8), two, word_ids)

    def keyword(*, epoch):  # called as fn(epoch) or fn(): a TypeError at the first read before
        return ["a"]

    with pytest.raises(ConfigError, match=r"function .*keyword needs 1 argument "
                                          r"\(keyword-only epoch\); it is called as fn\(epoch\)"):
        PackedTextSource(PackedTextConfig(seq_len=8), keyword, word_ids)


def test_a_transformers_style_tokenizer_is_refused_pointing_at_its_backend(hf_tokenizer) -> None:
    class PreTrainedTokenizerFast:  # the shape of a transformers tokenizer: a dict per call
        backend_tokenizer = hf_tokenizer

        def __call__(self, text):
            return {"input_ids": [1, 2], "attention_mask": [1, 1]}

    with pytest.raises(ConfigError, match=r"PreTrainedTokenizerFast \(a transformers tokenizer\)"
                       r".*Pass its .backend_tokenizer"):
        TextTokenizer(PreTrainedTokenizerFast())
    assert TextTokenizer(PreTrainedTokenizerFast().backend_tokenizer, eos_id=3).encode("the")[-1] == 3
