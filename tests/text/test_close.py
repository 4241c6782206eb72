"""Closing a PackedTextSource closes the document reader it reads (and a MixedDocuments
its corpora): remote files are let go at once, closing twice is safe, a later read
opens the reader again, and an error of the ``with`` block is never replaced by one
raised while closing."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import fsspec
import numpy as np
import pytest

from datarax.storage import ShardCache
from datarax.text import (
    FunctionDocuments,
    HFStreamDocuments,
    JsonlDocuments,
    MixedDocuments,
    PackedTextConfig,
    PackedTextSource,
)

CONFIG = PackedTextConfig(seq_len=4, open_rows=2)


def tokens(text: str) -> list[int]:
    return [int(w) for w in text.split()]


class Spy(FunctionDocuments):
    """Documents "1 2", "3", "4 5 6"; counts closes, fails them with ``fail``."""

    def __init__(self, fail: Exception | None = None) -> None:
        super().__init__(lambda epoch: ["1 2", "3", "4 5 6"])
        self.closes = 0
        self.fail = fail

    def close(self) -> None:
        self.closes += 1
        if self.fail is not None:
            raise self.fail


def rows(source: PackedTextSource) -> list[list[int]]:
    out = []
    while (batch := source.get_batch(2)) is not None:
        out.extend(np.asarray(batch["tokens"]).tolist())
    return out


def test_leaving_the_with_block_closes_the_reader_and_closing_again_is_safe() -> None:
    reader = Spy()
    with PackedTextSource(CONFIG, reader, tokens) as source:
        first = source.get_batch(1)
        assert reader.closes == 0
    assert reader.closes == 1
    source.close()
    assert reader.closes == 2  # the reader's close is itself safe to repeat
    # closing ends nothing for good: the next read goes on from the position
    assert np.asarray(first["tokens"]).tolist() + rows(source) == [[1, 2, 3, 0], [4, 5, 6, 0]]


def test_a_reader_without_close_is_accepted_and_closing_does_nothing_to_it() -> None:
    class Plain:
        def read(self, epoch: int, start: int) -> Iterator[Any]:
            return iter(["1 2 3"][start:])

        def describe(self, epoch: int, index: int) -> str:
            return f"doc {index}"

        def num_documents(self) -> int:
            return 1

    with PackedTextSource(CONFIG, Plain(), tokens) as source:
        assert rows(source) == [[1, 2, 3, 0]]
    source.close()


def test_an_error_in_the_block_is_not_replaced_by_one_raised_while_closing() -> None:
    reader = Spy(fail=OSError("bucket unreachable"))
    with pytest.raises(ValueError, match="the block's own error") as err:
        with PackedTextSource(CONFIG, reader, tokens):
            raise ValueError("the block's own error")
    assert reader.closes == 1
    assert err.value.__notes__ == [
        "closing the PackedTextSource also failed: OSError: bucket unreachable"
    ]
    # without an error in the block, the close's own error is raised
    with pytest.raises(OSError, match="bucket unreachable"):
        with PackedTextSource(CONFIG, reader, tokens):
            pass


def test_mixed_documents_close_every_corpus_even_when_one_fails() -> None:
    failing, fine = Spy(fail=OSError("first corpus")), Spy()
    mix = MixedDocuments({"a": failing, "b": fine, "c": lambda: ["7"]},
                         {"a": 1, "b": 1, "c": 1}, documents_per_epoch=4)
    source = PackedTextSource(CONFIG, mix, tokens)
    with pytest.raises(OSError, match="first corpus"):
        source.close()
    assert (failing.closes, fine.closes) == (1, 1)


def test_hf_stream_documents_close_their_stream() -> None:
    class Stream:
        closes = 0

        def element_spec(self) -> dict[str, Any]:
            return {"text": None}

        def seek(self, epoch: int, index: int) -> None: ...

        def get_batch_with_indices(self, size: int) -> tuple[None, None]:
            return None, None

        def close(self) -> None:
            self.closes += 1

    stream = Stream()
    HFStreamDocuments(stream).close()
    assert stream.closes == 1


def test_remote_files_are_let_go_when_the_source_closes(tmp_path: pathlib.Path) -> None:
    memory = fsspec.filesystem("memory")
    for k, part in enumerate((["1 2", "3"], ["4 5 6"])):
        memory.pipe(f"/close-test/part-{k}.jsonl",
                    "".join(json.dumps({"text": t}) + "\n" for t in part).encode())
    reader = JsonlDocuments("memory://close-test/part-*.jsonl",
                            cache=ShardCache(tmp_path / "cache", max_bytes="1M"))
    assert reader.storage_stats()["held"] == 2
    with PackedTextSource(CONFIG, reader, tokens) as source:
        assert rows(source) == [[1, 2, 3, 0], [4, 5, 6, 0]]
    assert reader.storage_stats()["held"] == 0
    source.close()  # twice: nothing left to let go
    assert reader.storage_stats()["held"] == 0
    source.seek(0, 0)  # a later pass holds the cached copies again, downloading nothing
    assert rows(source) == [[1, 2, 3, 0], [4, 5, 6, 0]]
    stats = reader.storage_stats()
    assert (stats["held"], stats["fetched"], stats["cache_hits"]) == (2, 2, 2)
    source.close()
