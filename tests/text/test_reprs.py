"""What a notebook shows of the text readers, tokenizer and packer: their settings, read
from what they hold (repr reads no file)."""

from __future__ import annotations

import pytest
from text_helpers import word_ids

from datarax.core.errors import ConfigError
from datarax.sources import MemorySource, MemorySourceConfig, ShuffleBufferSource
from datarax.text import (FunctionDocuments, HFStreamDocuments, JsonlDocuments,
                          MixedDocuments, Packer, TextTokenizer)


def pass_texts(epoch):
    return ["a b", "c"]


def test_document_readers_name_their_files_field_and_function(tmp_path) -> None:
    paths = [str(tmp_path / f"{i}.jsonl") for i in range(3)]
    for path in paths:
        open(path, "w").close()
    assert repr(JsonlDocuments(paths[:1], field="body")) == (
        f"JsonlDocuments([{paths[0]!r}], field='body')")
    assert repr(JsonlDocuments(paths)) == (
        f"JsonlDocuments([{paths[0]!r}, {paths[1]!r}, ... (3 files)], field='text')")
    assert repr(FunctionDocuments(pass_texts)) == "FunctionDocuments(pass_texts)"
    mix = MixedDocuments({"web": pass_texts, "code": pass_texts}, {"web": 3, "code": 1},
                         documents_per_epoch=8, seed=1)
    assert repr(mix) == ("MixedDocuments({'web': 0.75, 'code': 0.25}, documents_per_epoch=8, "
                         "seed=1)")


def test_hf_stream_documents_names_its_source_and_field() -> None:
    records = MemorySource(MemorySourceConfig(), {"text": ["a", "b"]})
    docs = HFStreamDocuments(ShuffleBufferSource(records, buffer_size=1), field="text")
    assert repr(docs) == "HFStreamDocuments(ShuffleBufferSource, field='text')"


def test_tokenizer_and_packer_show_their_settings_and_a_failed_build_does_not_raise() -> None:
    assert repr(TextTokenizer(word_ids, bos_id=1, max_tokens=5)) == (
        "TextTokenizer(function, bos_id=1, eos_id=None, max_tokens=5)")
    packer = Packer(seq_len=4, open_rows=2)
    packer.add(0, [1, 2, 3])
    packer.flush()
    packer.take(1)
    assert repr(packer) == ("Packer(seq_len=4, mode='first_fit', open_rows=2, pad_id=0): "
                            "1 row handed out")
    with pytest.raises(ConfigError) as raised:
        TextTokenizer(42)
    half_built = raised.traceback[-1].frame.f_locals["self"]  # a verbose traceback shows it
    assert repr(half_built) == "TextTokenizer(not built)"
