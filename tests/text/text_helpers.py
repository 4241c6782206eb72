"""Shared builders for the text tests: documents whose tokens name them."""

from __future__ import annotations

import numpy as np


def make_texts(count: int, seed: int = 0, low: int = 1, high: int = 40) -> list[str]:
    """Document ``i`` is the words ``1000*i + j`` for ``j < length`` (lengths random)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high, size=count)
    return [" ".join(str(1000 * i + j) for j in range(n)) for i, n in enumerate(lengths)]


def word_ids(text: str) -> list[int]:
    """The custom tokenizer of these tests: each word is its own integer id."""
    return [int(w) for w in text.split()]


def unpack(batches: list[dict]) -> dict[int, list[int]]:
    """Document -> its tokens, re-joined from packed rows in the order they were served."""
    docs: dict[int, list[int]] = {}
    for batch in batches:
        tokens = np.asarray(batch["tokens"])
        owner = np.asarray(batch["document_index"])
        for row_tokens, row_owner in zip(tokens, owner):
            for token, doc in zip(row_tokens.tolist(), row_owner.tolist()):
                if doc >= 0:
                    docs.setdefault(doc, []).append(token)
    return docs


def drain(source, batch_size: int) -> list[dict]:
    out = []
    while (batch := source.get_batch(batch_size)) is not None:
        out.append(batch)
    return out
