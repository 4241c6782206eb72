"""``TextPass``: one pass of packed text — read, check, tokenize, pack — on the host,
behind :class:`~datarax.text.source.PackedTextSource`.

From a snapshot (references, never tokens) or a bare ``(epoch, row)`` it rebuilds the
identical next rows; read-ahead peeks rows with the snapshot of their end, which a commit
makes the pass's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from datarax.core.errors import RecordError, StateError
from datarax.core.position import past_the_end, seek_past_the_end
from datarax.sources.read_ahead import ReadBatch, Sessions
from datarax.sources.skip_ledger import ErrorPolicy, SkipLedger, SkippedRecord
from datarax.text.documents import BadDocument
from datarax.text.packing import Packer
from datarax.text.snapshots import check_snapshot
from datarax.typing import Batch

# Draws of a mixture's corpus in a pass, all bad, after which it is refused (its weight ignored).
CORPUS_EVIDENCE = 16


class TextPass:
    """One pass of a packed-text source: reading, checking, tokenizing, packing.

    ``at`` is the ``(epoch, rows handed out)`` it stands at (None: nowhere); :meth:`follow`
    moves it to the owner's position. ``shard()`` gives ``(index, count)``.

    Example:
        >>> from datarax.text.packing import Packer
        >>> from datarax.text.documents import FunctionDocuments
        >>> from datarax.text.tokenize import TextTokenizer
        >>> from datarax.sources.skip_ledger import ErrorPolicy
        >>> text = TextPass(FunctionDocuments(lambda: ["a b", "c"]),
        ...                 TextTokenizer(lambda t: [len(w) for w in t.split()]),
        ...                 Packer(4), ErrorPolicy(), shard=lambda: (0, 1), block=8)
        >>> text.follow(0, 0); text.take(2)["tokens"].tolist()
        [[1, 1, 1, 0]]
    """

    def __init__(
        self,
        reader: Any,
        tokenizer: Any,
        packer: Packer,
        policy: ErrorPolicy,
        *,
        shard: Callable[[], tuple[int, int]],
        block: int,
    ) -> None:
        self.reader = reader
        self.tokenizer = tokenizer
        self.packer = packer
        self.policy = policy
        self._shard = shard
        self._block = block
        self.ledger = SkipLedger(policy, "PackedTextSource")  # bad documents of the pass
        self.snapshot: tuple[int, int, dict[str, Any]] | None = None
        self.sought: tuple[int, int] | None = None  # the position the last seek set
        self._last_bad = ""  # the cause of the last bad document the packer passed
        self._mix = reader if callable(getattr(reader, "corpus_of", None)) else None
        self.at: tuple[int, int] | None = None
        self.sessions = Sessions("PackedTextSource")  # one reader thread at a time
        self.defer_skips = False  # read ahead: skips are counted as their rows are handed out
        self.position = 0  # read ahead: the row handed out (committed)
        self._ahead = (0, 0)  # read ahead: (pass, the row after the last one peeked)
        # read ahead: (end, snapshot at end, documents passed) of each batch peeked
        self._peeked: deque[tuple[int, dict[str, Any], int]] = deque()
        self._reset(0)
        self.at = None

    def _reset(self, epoch: int) -> None:
        self._it: Any = None  # opened lazily at _read_at
        self._epoch = epoch
        self._buffer: deque[tuple[int, Any]] = deque()
        self._read_at = 0  # pass index of the next document the iterator yields
        self.next_document = 0  # documents of the pass consumed by the packer
        self.ledger.begin(epoch)
        self.documents = 0
        corpora = len(self._mix.names) if self._mix is not None else 0
        self.corpus_documents: list[int] | None = [0] * corpora if corpora else None
        self._corpus_drawn = [0] * corpora  # this shard's draws of each corpus (good or bad)
        self.ended = False
        self.packer.reset()

    def open_fresh(self, epoch: int) -> None:
        """Stand at the start of pass ``epoch``."""
        self._reset(epoch)
        self.at = (epoch, 0)

    def suspend(self, at: tuple[int, int] | None = None) -> None:
        """Release the reader, keeping a snapshot of ``at`` (the owner's position)."""
        with self.sessions.lock:
            self.sessions.begin()
            if self.at is not None and self._it is not None and (at is None or self.at == at):
                self.snapshot = (*self.at, self._extra())
            self._reset(self._epoch)
            self.at = None

    def follow(self, epoch: int, index: int, *, restoring: bool = False) -> None:
        """Stand at row ``index`` of pass ``epoch`` (the source's position: from a
        restored state when ``restoring``; a position past the pass's end is worded as
        a seek's when it is :attr:`sought`, else as a restored state's)."""
        if self.at == (epoch, index):
            return
        snapshot = self.snapshot
        if snapshot is not None and snapshot[:2] == (epoch, index):
            self._restore(epoch, snapshot[2])
        else:
            self.open_fresh(epoch)
            self._replay(index, by_seek=not restoring and self.sought == (epoch, index))
        self.at = (epoch, index)

    def _replay(self, rows: int, *, by_seek: bool) -> None:
        """Re-pack the pass from its start, discarding its first ``rows`` rows."""
        left = rows
        while left:
            self._fill(min(left, 1024))
            dropped = self.packer.drop(left)
            if dropped == 0 and not by_seek:
                raise past_the_end("PackedTextSource", self._epoch, rows,
                                   "other documents or settings", unit="rows", holds=rows - left)
            if dropped == 0:
                raise seek_past_the_end("PackedTextSource", self._epoch, rows, unit="rows",
                                        holds=rows - left)
            left -= dropped

    def start(self, epoch: int, index: int) -> int:
        """A new read-ahead session from row ``index`` of pass ``epoch``; returns it."""
        with self.sessions.lock:
            self._ahead, self.position = (epoch, index), index
            self._peeked.clear()
            return self.sessions.begin()

    def peek_batch(self, batch_size: int, session: int | None = None) -> ReadBatch | None:
        """The ``batch_size`` rows after those peeked, or None at the pass's end;
        ``SessionEnded`` once ``session`` is over. Bad documents count at commit."""
        with self.sessions.lock:
            self.sessions.check(session)
            epoch, index = self._ahead
            self.defer_skips = True
            self.follow(epoch, index)
            self.at = None  # packing: a take that raises leaves no position to report
            rows = self.take(batch_size)
            if rows is None:
                self.at = (epoch, index)
                return None
            end = index + len(rows["tokens"])
            self.at = self._ahead = (epoch, end)
            self._peeked.append((end, self._extra(), self.next_document))
            return ReadBatch(rows, np.arange(index, end), end)

    def commit(self, end: int | None) -> None:
        """Hand out every row before ``end`` (None: the rest of the pass)."""
        epoch, rest = self._ahead[0], end is None  # the rest: the worker stopped packing
        end = self._ahead[1] if end is None else int(end)
        while self._peeked and self._peeked[0][0] <= end:
            at, snapshot, passed = self._peeked.popleft()
            self.ledger.commit(passed)  # the bad documents passed before these rows
            self.snapshot = (epoch, at, snapshot)
        if rest:  # ... and those after the pass's last row
            self.ledger.commit(self.next_document)
        self.position = end

    def ready(self, batch_size: int) -> bool:
        return False  # packing the next rows may wait for the tokenizer: one at a time

    def stop(self, session: int | None = None) -> None:
        """End read-ahead ``session`` (None: any) and release the reader."""
        self.sessions.end(session, lambda: self.suspend(at=(self._ahead[0], self.position)))

    def direct(self) -> None:
        """The owner reads the pass itself: any read-ahead session ends (under the lock)."""
        self.sessions.begin()
        self.defer_skips = False

    def take(self, count: int) -> Batch | None:
        self._fill(count)
        if self.packer.ready == 0:
            self.ended = True
            return None
        return self.packer.take(count)

    def _fill(self, count: int) -> None:
        """Pack documents until ``count`` rows are ready or the pass is read."""
        packer = self.packer
        while packer.ready < count and not self.ended:
            if not self._buffer and not self._read_block():
                packer.flush()
                self.ended = True  # the pass is read; the rows left are ready
                self.ledger.check_pass_end(self.next_document)
                if self.documents == 0 and self.ledger.pulled:
                    raise RecordError(
                        f"PackedTextSource: every document of pass {self._epoch} was bad: "
                        f"{self.ledger.pulled} skipped and none packed (the last: "
                        f"{self._last_bad}). Check the reader's field or column and the "
                        "documents; on_error='skip' passes over bad documents among good ones."
                    )
                if self.next_document == 0:
                    raise RecordError(self._no_documents())
                break
            doc, ids = self._buffer.popleft()
            self.next_document = doc + 1
            if isinstance(ids, str):
                self._skip(doc, ids)
            else:
                packer.add(doc, ids)
                self.documents += 1
                if self._mix is not None:
                    corpus = self._mix.corpus_of(self._epoch, doc)
                    self._corpus_drawn[corpus] += 1
                    if self.corpus_documents is not None:
                        self.corpus_documents[corpus] += 1
        if packer.ready:
            self.ended = False

    def _no_documents(self) -> str:
        shard, count = self._shard()
        if count == 1 or self._read_at == 0:
            return (
                f"PackedTextSource: pass {self._epoch} holds no documents: the reader "
                f"({type(self.reader).__name__}) gave none. Check the documents function, "
                "the files (an empty file?) and their paths."
            )
        return (
            f"PackedTextSource: pass {self._epoch} holds {self._read_at} documents, none for "
            f"this process (shard {shard} of {count} packs documents {shard}, "
            f"{shard} + {count}, ...). Give every process documents: fewer processes or "
            "more documents."
        )

    def _read_block(self) -> bool:
        """Read, check and tokenize the next block of this shard's documents."""
        if self._it is None:
            self._it = iter(self.reader.read(self._epoch, self._read_at))
        shard, count = self._shard()
        block = self._block
        texts: list[str] = []
        indices: list[int] = []
        for raw in self._it:
            index = self._read_at
            self._read_at += 1
            if index % count != shard:
                continue
            text = self._checked_text(index, raw)
            if text is None:
                continue
            texts.append(text)
            indices.append(index)
            if len(texts) + len(self._buffer) >= block:
                break
        ids = self._encode(texts, indices) if texts else []
        specials = (self.tokenizer.bos_id is not None) + (self.tokenizer.eos_id is not None)
        for index, doc_ids in zip(indices, ids):
            if len(doc_ids) == specials:
                self._bad(index, "is empty (it has no tokens)")
            else:
                self._buffer.append((index, doc_ids))
        self._buffer = deque(sorted(self._buffer, key=lambda item: item[0]))
        return bool(self._buffer)

    def _encode(self, texts: list[str], indices: list[int]) -> list[np.ndarray]:
        return self.tokenizer.encode_batch(
            texts, where=lambda i: self.reader.describe(self._epoch, indices[i])
        )

    def _checked_text(self, index: int, raw: Any) -> str | None:
        """The text of a document, or None after routing a bad one to the policy."""
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                self._bad(index, f"is not valid UTF-8 ({err.reason} at byte {err.start})")
                return None
        if isinstance(raw, BadDocument):
            self._bad(index, raw.reason)
            return None
        if not isinstance(raw, str):
            self._bad(index, _not_text(raw))
            return None
        if not raw.strip():
            self._bad(index, "is empty (no text)" if not raw else
                      f"is blank (only whitespace, {len(raw)} characters: no text)")
            return None
        if not raw.isascii():
            try:
                raw.encode("utf-8")
            except UnicodeEncodeError as err:
                self._bad(
                    index,
                    f"holds a lone surrogate (U+{ord(raw[err.start]):04X} at character "
                    f"{err.start}), which is not valid Unicode text",
                )
                return None
        return raw

    def _bad(self, index: int, reason: str) -> None:
        where = self.reader.describe(self._epoch, index)
        if not self.policy.skips:
            raise RecordError(
                f"PackedTextSource: {where} {reason}. Fix or remove that document, or pass "
                "on_error='skip' to skip and count bad documents.",
                index=index,
            )
        self._buffer.append((index, f"{where} {reason}"))

    def _skip(self, index: int, cause: str) -> None:
        """The packer passes bad document ``index``: count it (the budget may stop the pass)."""
        self._last_bad = cause
        self.ledger.pull(
            SkippedRecord(self._epoch, index, index, None, index, cause), epoch_size=None
        )
        if not self.defer_skips:
            self.ledger.commit(index + 1)
        if self._mix is not None:
            self._check_corpus(index, cause)

    def _check_corpus(self, index: int, cause: str) -> None:
        """Refuse a mixture's corpus drawn :data:`CORPUS_EVIDENCE` times with every document bad."""
        mix = self._mix
        corpus = mix.corpus_of(self._epoch, index)
        self._corpus_drawn[corpus] += 1
        drawn = self._corpus_drawn[corpus]
        if self.corpus_documents is None or self.corpus_documents[corpus] > 0:
            return
        # one host meets all of a corpus's documents in as many draws as it holds
        count = self._shard()[1]
        needed = CORPUS_EVIDENCE if count > 1 else min(CORPUS_EVIDENCE, mix.sizes()[corpus])
        if drawn < needed:
            return
        shares = dict(zip(mix.names, (round(float(w), 6) for w in mix.weights)))
        raise RecordError(
            f"PackedTextSource: corpus '{mix.names[corpus]}' of the mixture served none of "
            f"the {drawn} documents drawn from it in pass {self._epoch}: every one was bad "
            f"(the last: {cause}). Skipping them all would ignore its weight (weights "
            f"{shares}). Check that corpus's field or column and its documents, or give it "
            "weight 0.",
            index=index,
        )

    def stats(self, at: tuple[int, int] | None = None) -> dict[str, Any]:
        """Rows, tokens, efficiency, documents and skips up to ``at`` (the owner's position)."""
        with self.sessions.lock:  # a read-ahead thread may be packing
            if at is not None and self.at is not None and self.at != at:  # read ahead of it
                extra = self.snapshot_at(*at) or self._extra()
            elif self.at is None and self.snapshot is not None:  # suspended: its snapshot
                extra = self.snapshot[2]
            else:
                extra = self._extra()
        rows, tokens = extra["packer"]["rows_packed"], extra["packer"]["tokens_packed"]
        return {"rows": rows, "tokens": tokens,
                "efficiency": tokens / (rows * self.packer.seq_len) if rows else 1.0,
                "documents": extra.get("documents", 0), "skipped": extra["skipped"],
                **self._corpus_stats(extra.get("corpus_documents"))}

    def _corpus_stats(self, counts: list[int] | None) -> dict[str, Any]:
        if self._mix is None or counts is None:
            return {}
        return {"corpus_documents": dict(zip(self._mix.names, counts))}

    def _extra(self) -> dict[str, Any]:
        return {
            "next_document": self.next_document,
            "skipped": self.ledger.pulled,  # passed by the packer (read ahead: not all counted yet)
            "documents": self.documents,
            **self._corpus_extra(self.corpus_documents),
            "packer": self.packer.snapshot(),  # shared tuples: see snapshot_at
        }

    @staticmethod
    def _corpus_extra(counts: list[int] | None) -> dict[str, Any]:
        return {} if counts is None else {"corpus_documents": list(counts)}

    def snapshot_at(self, epoch: int, index: int) -> dict[str, Any]:
        """The snapshot of row ``index`` of pass ``epoch`` if known here, else ``{}``."""
        with self.sessions.lock:
            if self.at == (epoch, index):
                extra = self._extra()
                return {**extra, "packer": Packer.as_lists(extra["packer"])}
        if self.snapshot is not None and self.snapshot[:2] == (epoch, index):
            extra = self.snapshot[2]
            return {**extra, "packer": Packer.as_lists(extra["packer"])}
        if index == 0:
            return {"next_document": 0, "skipped": 0, "documents": 0,
                    **self._corpus_extra([0] * len(self._mix.names) if self._mix else None),
                    "packer": Packer(1).get_state()}
        return {}  # unknown here: a restore re-packs the pass up to the position

    def check_snapshot(self, state: dict[str, Any]) -> None:
        """Refuse a malformed snapshot, naming the key."""
        corpora = len(self._mix.names) if self._mix is not None else 0
        check_snapshot(state, corpora, *self._shard())

    def _restore(self, epoch: int, state: dict[str, Any]) -> None:
        """Rebuild pass ``epoch`` at a snapshot, re-tokenizing the documents it references."""
        where = "PackedTextSource"
        packer_state = state["packer"]
        needed = sorted(Packer.documents_in(packer_state))
        next_document = state["next_document"]
        self._reset(epoch)
        start = needed[0] if needed else next_document
        it = iter(self.reader.read(epoch, start))
        texts: dict[int, str] = {}
        wanted = set(needed)
        for index in range(start, next_document):
            raw = next(it, _END)
            if raw is _END:
                raise past_the_end(where, epoch, next_document, "other documents",
                                   unit="documents", done="read", holds=index,
                                   field="next_document")
            if index in wanted:
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
                if not isinstance(text, str):
                    raise StateError(
                        f"{where} state refers to {self.reader.describe(epoch, index)}, which "
                        "is not text now; the documents changed since the state was saved.",
                        field="packer",
                    )
                texts[index] = text
        order = list(texts)
        ids = dict(zip(order, self._encode([texts[i] for i in order], order))) if order else {}
        self.packer.restore(packer_state, ids.__getitem__)
        self._it = it
        self._read_at = next_document
        self.next_document = next_document
        self.ledger.begin(epoch, state["skipped"])
        self.documents = state.get("documents", 0)
        if self._mix is not None:
            counts = state.get("corpus_documents")  # absent: a hand-made state, not checked
            self.corpus_documents = None if counts is None else list(counts)
            shard, count = self._shard()
            self._corpus_drawn = self._mix.draws_in(epoch, next_document, shard, count)


_END = object()


def _not_text(raw: Any) -> str:
    """Why ``raw``, not a str, is no document; a record (a dict) names its keys."""
    if isinstance(raw, Mapping):
        keys = sorted(map(str, raw))
        field = "text" if "text" in keys or not keys else keys[0]
        return (f"is a dict (keys {keys}), not str or bytes: the reader must yield each "
                f"document's text, e.g. (record['{field}'] for record in records)")
    return f"is {type(raw).__name__}, not str or bytes"
