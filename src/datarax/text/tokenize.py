"""``TextTokenizer``: documents to int32 token ids, a block at a time, on the host.

Invariant: a document's ids never depend on the block it was encoded in, so
re-tokenizing it on restore gives the same ids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from datarax.core.errors import ConfigError, RecordError
from datarax.core.extras import require
from datarax.host.counts import python_ints

_INT32_MAX = 2**31 - 1


class TextTokenizer:
    """Encode blocks of documents to int32 ids, with optional BOS/EOS and truncation.

    Args:
        tokenizer: a ``tokenizers.Tokenizer``, a path to a ``tokenizer.json``, or a
            callable ``str -> sequence of ints >= 0``. A ``Tokenizer``'s padding and
            special tokens are not used (use ``bos_id`` / ``eos_id``); one that truncates
            is refused (use ``max_tokens``).
        bos_id: id put before every document (None: none).
        eos_id: id put after every document (None: none).
        max_tokens: keep at most this many ids per document, BOS/EOS included (EOS stays
            last). None keeps every id.

    Example:
        >>> tok = TextTokenizer(lambda text: [len(w) for w in text.split()], eos_id=0)
        >>> [ids.tolist() for ids in tok.encode_batch(["a bb ccc", "dddd"])]
        [[1, 2, 3, 0], [4, 0]]
        >>> TextTokenizer(lambda t: [1, 2, 3, 4], bos_id=9, max_tokens=3).encode("x").tolist()
        [9, 1, 2]
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        bos_id, eos_id, max_tokens = python_ints((bos_id, eos_id, max_tokens))
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= _INT32_MAX
            ):
                token = (f" (a token; pass its id: tokenizer.token_to_id({value!r}))"
                         if isinstance(value, str) else "")
                raise ConfigError(
                    f"TextTokenizer {name} must be None or an int id >= 0, got {value!r}{token}."
                )
        specials = (bos_id is not None) + (eos_id is not None)
        if max_tokens is not None and (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or max_tokens <= specials
        ):
            raise ConfigError(
                f"TextTokenizer max_tokens must be None or an int > {specials} (the BOS/EOS "
                f"ids it must hold plus one), got {max_tokens!r}."
            )
        path: str | None = None
        if isinstance(tokenizer, (str, os.PathLike)):
            hf = require("tokenizers", extra="tokenizers", user="TextTokenizer")
            path = os.fspath(tokenizer)
            if not os.path.isfile(path):
                raise ConfigError(
                    f"TextTokenizer: the tokenizer file {path!r} does not exist or is not a "
                    "file. Pass the path of a tokenizer.json (Tokenizer.save writes one)."
                )
            try:
                tokenizer = hf.Tokenizer.from_file(path)
            except Exception as err:  # the Rust library raises a bare Exception
                raise ConfigError(
                    f"TextTokenizer: cannot load the tokenizer file {path!r}: {err}. Pass "
                    "the path of a tokenizer.json (Tokenizer.save writes one)."
                ) from err
        self._fast = _is_hf_tokenizer(tokenizer)
        if not self._fast and _is_hf_tokenizer(getattr(tokenizer, "backend_tokenizer", None)):
            raise ConfigError(
                f"TextTokenizer: {type(tokenizer).__name__} (a transformers tokenizer) returns "
                "a dict per call, not ids. Pass its .backend_tokenizer (the tokenizers.Tokenizer "
                "inside) with bos_id= / eos_id= for the special tokens, or a function "
                "returning tokenizer(text)['input_ids']."
            )
        if self._fast:
            tokenizer = _for_packing(tokenizer, source=path)
            _check_special_ids(tokenizer.get_vocab_size(), bos_id=bos_id, eos_id=eos_id)
        if not self._fast and not callable(tokenizer):
            raise ConfigError(
                f"TextTokenizer needs a tokenizers.Tokenizer, a path to a tokenizer.json or a "
                f"callable str -> list of ints, got {type(tokenizer).__name__}."
            )
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        if not hasattr(self, "max_tokens"):  # __init__ raised
            return "TextTokenizer(not built)"
        return (f"TextTokenizer({self.name}, bos_id={self.bos_id}, eos_id={self.eos_id}, "
                f"max_tokens={self.max_tokens})")

    @property
    def name(self) -> str:
        """The class of the wrapped tokenizer or callable."""
        return type(self.tokenizer).__name__

    @property
    def described(self) -> str:
        """The tokenizer as a message names it: ``function 'words'``, or its class."""
        name = getattr(self.tokenizer, "__name__", None)
        if isinstance(name, str) and name != "<lambda>" and callable(self.tokenizer):
            return f"{self.name} {name!r}"
        return self.name

    def settings(self) -> dict[str, Any]:
        """What decides the ids: the tokenizer's name (and vocabulary size), BOS, EOS, ``max_tokens``.

        Example:
            >>> def words(text): return [len(w) for w in text.split()]
            >>> TextTokenizer(words, eos_id=0).settings()
            {'name': 'words', 'bos_id': None, 'eos_id': 0, 'max_tokens': None}
        """
        out: dict[str, Any] = {"name": getattr(self.tokenizer, "__qualname__", self.name)}
        if self._fast:
            out = {"name": self.name, "vocab_size": int(self.tokenizer.get_vocab_size())}
        out.update(bos_id=self.bos_id, eos_id=self.eos_id, max_tokens=self.max_tokens)
        return out

    def encode(self, text: str) -> np.ndarray:
        """The int32 ids of one document."""
        return self.encode_batch([text])[0]

    def encode_batch(
        self, texts: Sequence[str], *, where: Callable[[int], str] | None = None
    ) -> list[np.ndarray]:
        """The int32 ids of each document in ``texts``; ``where(i)`` names document ``i`` in errors."""
        where = where if where is not None else (lambda i: f"document {i} of the block")
        if self._fast:
            encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
            raw: list[Any] = [e.ids for e in encodings]
        else:
            raw = [self._call(t, i, where) for i, t in enumerate(texts)]
        out = []
        for i, ids in enumerate(raw):
            array = np.asarray(ids)
            if not self._fast:
                array = self._checked(array, ids, i, where)
            out.append(self._finish(array))
        return out

    def _call(self, text: str, i: int, where: Callable[[int], str]) -> Any:
        try:
            return self.tokenizer(text)
        except Exception as err:
            raise RecordError(
                f"TextTokenizer: the tokenizer {self.described} raised {type(err).__name__} "
                f"({err}) on {where(i)}; fix the tokenizer, or the document."
            ) from err

    def _checked(
        self, array: np.ndarray, ids: Any, i: int, where: Callable[[int], str]
    ) -> np.ndarray:
        if array.size == 0:
            return np.zeros((0,), np.int32)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise RecordError(
                f"TextTokenizer: the tokenizer {self.described} returned {type(ids).__name__} "
                f"with dtype {array.dtype} and shape {array.shape} for {where(i)}; it must "
                "return a flat sequence of int ids."
            )
        if array.min() < 0 or array.max() > _INT32_MAX:
            raise RecordError(
                f"TextTokenizer: the tokenizer {self.described} returned ids outside "
                f"[0, {_INT32_MAX}] for {where(i)} (min {array.min()}, max {array.max()}); "
                "token ids must be >= 0 (an embedding row) and fit int32 (the rows' dtype)."
            )
        return array

    def _finish(self, ids: np.ndarray) -> np.ndarray:
        ids = ids.astype(np.int32, copy=False)
        if self.max_tokens is not None:
            room = self.max_tokens - (self.bos_id is not None) - (self.eos_id is not None)
            ids = ids[:room]
        if self.bos_id is None and self.eos_id is None:
            return ids
        bos = [] if self.bos_id is None else [self.bos_id]
        eos = [] if self.eos_id is None else [self.eos_id]
        return np.concatenate([np.array(bos, np.int32), ids, np.array(eos, np.int32)])


def _for_packing(tokenizer: Any, source: str | None) -> Any:
    """A ``tokenizers.Tokenizer`` whose ids of a document are the document's alone: a copy
    without padding (it would make ids depend on the block); truncation is refused."""
    truncation = tokenizer.truncation
    if truncation is not None:
        where = f"the tokenizer file {source!r}" if source else "the tokenizers.Tokenizer"
        raise ConfigError(
            f"TextTokenizer: {where} truncates every document to "
            f"{truncation.get('max_length')} tokens (its truncation setting); packing would "
            "drop the rest of each longer document in silence. Call no_truncation() on the "
            "Tokenizer (for a file: tokenizers.Tokenizer.from_file(path) first) and pass "
            "max_tokens= to TextTokenizer to cut documents on purpose (it keeps the EOS last)."
        )
    if tokenizer.padding is not None:
        tokenizer = type(tokenizer).from_str(tokenizer.to_str())  # the caller's is untouched
        tokenizer.no_padding()
    return tokenizer


def _check_special_ids(vocab_size: int, **ids: int | None) -> None:
    """Refuse a BOS / EOS id past the vocabulary (a JAX gather would clamp it in silence)."""
    for name, value in ids.items():
        if value is not None and value >= vocab_size:
            raise ConfigError(
                f"TextTokenizer {name}={value} is not an id of the tokenizer (its vocabulary "
                f"holds ids 0..{vocab_size - 1}), so a model's embedding table has no row for "
                "it. Add the token to the tokenizer (tokenizer.add_special_tokens(['[BOS]'])) "
                "and pass its id (tokenizer.token_to_id('[BOS]'))."
            )


def _is_hf_tokenizer(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("tokenizers") and hasattr(obj, "encode_batch_fast")


def as_tokenizer(tokenizer: Any) -> TextTokenizer:
    """``tokenizer`` as a :class:`TextTokenizer` (wrapped without BOS/EOS if it is not one).

    Example:
        >>> as_tokenizer(lambda t: [1]).encode("x").tolist()
        [1]
    """
    if isinstance(tokenizer, TextTokenizer):
        return tokenizer
    return TextTokenizer(tokenizer)
