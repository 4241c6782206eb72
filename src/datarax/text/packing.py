"""``Packer``: variable-length token sequences into fixed ``seq_len`` rows.

Modes (docs/text.md): ``"first_fit"``, ``"best_fit"``, ``"concat"``; nothing is dropped.
The state holds only references ``(document, start, end)`` per piece, re-tokenized on
restore; a long document's back-to-back rows are saved as one run, so it stays small.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from datarax.core.errors import ConfigError, StateError
from datarax.host.counts import count_words

MODES = ("first_fit", "best_fit", "concat")
FIELDS = ("tokens", "segment_ids", "positions", "targets", "loss_mask")


class _Row:
    __slots__ = ("pieces", "used", "_refs")

    def __init__(self) -> None:
        self.pieces: list[tuple[int, int, int, np.ndarray]] = []  # (doc, start, end, ids)
        self.used = 0
        self._refs: tuple[int, ...] | None = None

    def add(self, doc: int, start: int, ids: np.ndarray) -> None:
        self.pieces.append((doc, start, start + len(ids), ids))
        self.used += len(ids)
        self._refs = None

    def refs(self) -> tuple[int, ...]:
        # Built once and shared: the packer is snapshot after every batch read ahead.
        if self._refs is None:
            self._refs = tuple(x for doc, s, e, _ in self.pieces for x in (doc, s, e))
        return self._refs


class Packer:
    """Pack documents' token ids into ``seq_len`` rows; emitted rows queue up in order.

    Example:
        >>> p = Packer(seq_len=4, mode="first_fit", open_rows=1)
        >>> for doc, n in enumerate([3, 2, 1, 6]):
        ...     p.add(doc, np.arange(n, dtype=np.int32) + 10 * doc)
        >>> p.flush()
        >>> rows = p.take(10)
        >>> rows["tokens"].tolist()
        [[0, 1, 2, 0], [10, 11, 20, 0], [30, 31, 32, 33], [34, 35, 0, 0]]
        >>> rows["segment_ids"][1].tolist(), rows["positions"][1].tolist()
        ([1, 1, 2, 0], [0, 1, 0, 0])
        >>> rows["targets"][1].tolist(), rows["loss_mask"][1].tolist()
        ([11, 0, 0, 0], [1, 0, 0, 0])
        >>> p.efficiency()
        0.75
    """

    def __init__(
        self,
        seq_len: int,
        mode: str = "first_fit",
        open_rows: int = 8,
        pad_id: int = 0,
        with_document_index: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"Packer mode must be one of {list(MODES)}, got {mode!r}.")
        self.seq_len = int(seq_len)
        self.mode = mode
        self.open_rows = 1 if mode == "concat" else int(open_rows)
        self.pad_id = int(pad_id)
        self.with_document_index = with_document_index
        self.reset()

    def __repr__(self) -> str:
        return (f"Packer(seq_len={self.seq_len}, mode={self.mode!r}, "
                f"open_rows={self.open_rows}, pad_id={self.pad_id}): "
                f"{count_words(getattr(self, 'rows_packed', 0), 'row')} handed out")

    def reset(self) -> None:
        """Forget every open and ready row and the counters (start of a pass)."""
        self._open: list[_Row] = []
        self._ready: deque[_Row] = deque()
        self.tokens_packed = 0  # tokens in rows handed out by take()
        self.rows_packed = 0  # rows handed out by take()

    def add(self, doc: int, ids: np.ndarray) -> None:
        """Pack document ``doc``'s ids (cut into pieces when needed)."""
        if self.mode == "concat":
            self._add_concat(doc, ids)
            return
        n, start = len(ids), 0
        while start < n:
            piece = ids[start : start + self.seq_len]
            self._place(doc, start, piece)
            start += len(piece)

    def _add_concat(self, doc: int, ids: np.ndarray) -> None:
        start = 0
        while start < len(ids):
            if not self._open:
                self._open.append(_Row())
            row = self._open[0]
            piece = ids[start : start + self.seq_len - row.used]
            row.add(doc, start, piece)
            start += len(piece)
            if row.used == self.seq_len:
                self._ready.append(self._open.pop())

    def _place(self, doc: int, start: int, piece: np.ndarray) -> None:
        size = len(piece)
        room = self.seq_len - size
        target = None
        if self.mode == "first_fit":
            for row in self._open:
                if row.used <= room:
                    target = row
                    break
        else:
            best = -1
            for row in self._open:
                if best < row.used <= room:
                    target, best = row, row.used
        if target is None:
            if len(self._open) >= self.open_rows:
                fullest = max(range(len(self._open)), key=lambda i: (self._open[i].used, -i))
                self._ready.append(self._open.pop(fullest))
            target = _Row()
            self._open.append(target)
        target.add(doc, start, piece)
        if target.used == self.seq_len:
            self._open.remove(target)
            self._ready.append(target)

    def flush(self) -> None:
        """End of the pass: emit every open row, oldest first."""
        self._ready.extend(self._open)
        self._open = []

    @property
    def ready(self) -> int:
        """Rows emitted and not yet taken."""
        return len(self._ready)

    def take(self, count: int) -> dict[str, np.ndarray]:
        """Up to ``count`` ready rows as int32 ``[rows, seq_len]``: ``tokens``,
        ``segment_ids`` (1, 2, ... per piece, 0 on padding), ``positions`` (within each
        piece), ``targets`` (the piece's next token, else ``pad_id``), ``loss_mask`` (1 where
        ``targets`` is real) and, optionally, ``document_index`` (-1 on padding)."""
        rows = [self._ready.popleft() for _ in range(min(count, len(self._ready)))]
        shape = (len(rows), self.seq_len)
        tokens = np.full(shape, self.pad_id, np.int32)
        segment_ids = np.zeros(shape, np.int32)
        positions = np.zeros(shape, np.int32)
        loss_mask = np.zeros(shape, np.int32)
        document = np.full(shape, -1, np.int32) if self.with_document_index else None
        arange = np.arange(self.seq_len, dtype=np.int32)
        for r, row in enumerate(rows):
            at = 0
            for seg, (doc, _, _, ids) in enumerate(row.pieces, 1):
                end = at + len(ids)
                tokens[r, at:end] = ids
                segment_ids[r, at:end] = seg
                positions[r, at:end] = arange[: end - at]
                loss_mask[r, at : end - 1] = 1
                if document is not None:
                    document[r, at:end] = doc
                at = end
            self.tokens_packed += at
        self.rows_packed += len(rows)
        targets = np.full(shape, self.pad_id, np.int32)
        targets[:, :-1] = np.where(loss_mask[:, :-1] == 1, tokens[:, 1:], self.pad_id)
        out = {
            "tokens": tokens,
            "segment_ids": segment_ids,
            "positions": positions,
            "targets": targets,
            "loss_mask": loss_mask,
        }
        if document is not None:
            out["document_index"] = document
        return out

    def drop(self, count: int) -> int:
        """Discard up to ``count`` ready rows as if taken (replaying to a position)."""
        dropped = 0
        while dropped < count and self._ready:
            self.tokens_packed += self._ready.popleft().used
            dropped += 1
        self.rows_packed += dropped
        return dropped

    def efficiency(self) -> float:
        """Share of non-padding tokens in the rows taken so far (1.0 before any)."""
        if not self.rows_packed:
            return 1.0
        return self.tokens_packed / (self.rows_packed * self.seq_len)

    def get_state(self) -> dict[str, Any]:
        """References of open and ready rows: ``[doc, start, end, ...]`` per row; a run of
        ready rows each cut from one document as ``{"document", "start", "rows", "row_tokens"}``.

        Example:
            >>> p = Packer(seq_len=4, open_rows=1)
            >>> p.add(0, np.arange(2, dtype=np.int32)); p.add(1, np.arange(13, dtype=np.int32))
            >>> p.get_state()["ready"]
            [[0, 0, 2], {'document': 1, 'start': 0, 'rows': 3, 'row_tokens': 4}]
            >>> p.get_state()["open"]
            [[1, 12, 13]]
        """
        return self.as_lists(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """:meth:`get_state` with each row's references as a tuple shared with the row
        (cheap enough to take after every batch; :meth:`as_lists` makes it JSON's)."""
        return {
            "open": [row.refs() for row in self._open],
            "ready": [row.refs() for row in self._ready],
            "tokens_packed": self.tokens_packed,
            "rows_packed": self.rows_packed,
        }

    @staticmethod
    def as_lists(state: dict[str, Any]) -> dict[str, Any]:
        """A :meth:`snapshot` as JSON's lists, with runs (what :meth:`get_state` returns)."""
        return {
            **state,
            "open": [list(refs) for refs in state["open"]],
            "ready": _as_runs(state["ready"]),
        }

    @staticmethod
    def documents_in(state: dict[str, Any]) -> set[int]:
        """The documents a state's rows hold pieces of (to re-read on restore)."""
        return {
            refs[i] for refs in _expand(state["open"] + state["ready"])
            for i in range(0, len(refs), 3)
        }

    def restore(self, state: dict[str, Any], ids_of: Callable[[int], np.ndarray]) -> None:
        """Rebuild rows from :meth:`get_state` output; ``ids_of(doc)`` re-tokenizes."""
        self.reset()
        self.tokens_packed = int(state["tokens_packed"])
        self.rows_packed = int(state["rows_packed"])
        for key, target in (("open", self._open), ("ready", self._ready)):
            for refs in _expand(state[key]):
                row = _Row()
                for i in range(0, len(refs), 3):
                    doc, start, end = refs[i : i + 3]
                    ids = ids_of(doc)
                    if not 0 <= start < end <= len(ids):
                        raise StateError(
                            f"Packer state refers to tokens [{start}, {end}) of document {doc}, "
                            f"which has {len(ids)} tokens now; the documents or the tokenizer "
                            "changed since the state was saved. Restore it where they are as "
                            "they were, or start the pass afresh ({'current_epoch': E, "
                            "'current_index': 0}).",
                            field="packer",
                        )
                    row.add(doc, start, ids[start:end])
                if row.used > self.seq_len:
                    raise StateError(
                        f"Packer state holds a row of {row.used} tokens, more than seq_len="
                        f"{self.seq_len}; it was saved with another seq_len.",
                        field="packer",
                    )
                target.append(row)


RUN_KEYS = ("document", "start", "rows", "row_tokens")


def _as_runs(rows: Any) -> list[Any]:
    """Ready rows as JSON lists; back-to-back equal one-piece rows of a document as a run."""
    out: list[Any] = []
    for refs in rows:
        if isinstance(refs, dict):  # already a run (a state read back from JSON)
            out.append(dict(refs))
            continue
        if len(refs) == 3 and out:
            doc, start, end = refs
            last = out[-1]
            if isinstance(last, dict):
                if (last["document"] == doc and end - start == last["row_tokens"]
                        and last["start"] + last["rows"] * last["row_tokens"] == start):
                    last["rows"] += 1
                    continue
            elif len(last) == 3 and last[0] == doc and last[2] == start and (
                    last[2] - last[1] == end - start):
                out[-1] = {"document": doc, "start": last[1], "rows": 2, "row_tokens": end - start}
                continue
        out.append(list(refs))
    return out


def _expand(rows: Any) -> Any:
    """Each row's references, runs of :func:`_as_runs` given back row by row."""
    for refs in rows:
        if not isinstance(refs, dict):
            yield refs
            continue
        if sorted(refs) != sorted(RUN_KEYS) or not all(
            isinstance(refs[k], int) and not isinstance(refs[k], bool) for k in RUN_KEYS
        ) or refs["rows"] < 1 or refs["row_tokens"] < 1:
            raise StateError(
                f"Packer state holds a malformed run of rows {refs!r}; a run is "
                f"{{'document', 'start', 'rows', 'row_tokens'}} of ints (rows and row_tokens "
                ">= 1), as get_state() returns it.",
                field="packer",
            )
        doc, start, step = refs["document"], refs["start"], refs["row_tokens"]
        for r in range(refs["rows"]):
            yield (doc, start + r * step, start + (r + 1) * step)
