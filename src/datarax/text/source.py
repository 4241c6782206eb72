"""``PackedTextSource``: documents -> tokens -> packed ``seq_len`` rows, as a stream.

Packing changes the number of records (many documents become fewer fixed-length rows),
so it is a source, not a per-batch stage: Pipeline reads packed rows from it like from
any forward-only stream. This module is only the adapter; the work is done by plain
host objects: a document reader (:mod:`datarax.text.documents`, or
:class:`~datarax.text.mixing.MixedDocuments`), a :class:`~datarax.text.tokenize.TextTokenizer`
and a :class:`~datarax.text.packing.Packer`.

Position: like every source, the base's ``(epoch, index)`` — here rows handed out of
the pass — is the one truth. The packer's progress is derived from it: when the
position moves from outside (``seek``, ``set_state``, ``nnx.update``, a new pass) the
pass is rebuilt before the next read, from a snapshot when one matches, else by
re-packing the pass up to that row (packing is deterministic).

State (``get_state()``): ``current_epoch``, ``current_index``, and — the snapshot that
makes a restore cheap — ``next_document`` (documents of the pass the packer consumed),
``skipped``, ``documents`` and ``packer`` (references ``[doc, start, end, ...]`` of the
rows still open or ready, never tokens). ``set_state`` re-reads the pass from the
oldest referenced document, re-tokenizes the referenced ones to rebuild those rows, and
continues at ``next_document``: the next batch is identical to the one the saved source
would have served.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_bool, check_int
from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.core.stream import StreamSource
from datarax.sources.host_reader import ErrorPolicy, SkippedRecord
from datarax.text.documents import BadDocument, as_reader
from datarax.text.packing import FIELDS, MODES, Packer
from datarax.text.tokenize import as_tokenizer

Batch = dict[str, Any]


@dataclass(frozen=True)
class PackedTextConfig(StructuralConfig):
    """Configuration of :class:`PackedTextSource`.

    Attributes:
        seq_len: tokens per packed row.
        packing: ``"first_fit"``, ``"best_fit"`` or ``"concat"`` (see
            :mod:`datarax.text.packing`).
        open_rows: rows the fit modes keep open at once (more: fuller rows, a larger
            state); ``"concat"`` uses one.
        pad_id: id of padding in ``tokens`` and ``targets``.
        tokenize_block: documents encoded per tokenizer call (the Rust batch encoder
            spreads a block over its threads).
        on_error: ``"raise"`` stops at a bad document (invalid UTF-8, not text, empty)
            with a :class:`RecordError` naming it; ``"skip"`` skips and counts it
            (``skipped_documents()``, ``get_state()["skipped"]``).
        max_skipped: with ``"skip"``, most documents one pass may skip (None: no limit).
        with_document_index: also serve ``document_index`` (the pass's document
            number of each token, -1 on padding).
        num_epochs: passes direct iteration makes (-1: unbounded).
    """

    seq_len: int = 512
    packing: str = "first_fit"
    open_rows: int = 8
    pad_id: int = 0
    tokenize_block: int = 256
    on_error: str = "raise"
    max_skipped: int | None = None
    with_document_index: bool = False
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "seq_len", minimum=1)
        check_int(self, "open_rows", minimum=1)
        check_int(self, "pad_id", minimum=0)
        check_int(self, "tokenize_block", minimum=1)
        check_int(self, "num_epochs", minimum=1, allowed=(-1,))
        check_bool(self, "with_document_index")
        if self.packing not in MODES:
            raise ConfigError(
                f"PackedTextConfig.packing must be one of {list(MODES)}, got {self.packing!r}."
            )
        self.error_policy()

    def error_policy(self) -> ErrorPolicy:
        try:
            return ErrorPolicy(self.on_error, self.max_skipped)
        except ConfigError as err:
            raise ConfigError(f"PackedTextConfig: {err}") from None


class PackedTextSource(StreamSource):
    """Packed token rows from documents, tokenized on the host, as a forward-only stream.

    Args:
        config: a :class:`PackedTextConfig`.
        documents: a reader (``JsonlDocuments``, ``ParquetDocuments``, ``MixedDocuments``,
            ``HFStreamDocuments``, ``FunctionDocuments``) or a function returning the
            documents of a pass (``fn(epoch)`` or ``fn()``), the same ones in the same
            order every call.
        tokenizer: a :class:`TextTokenizer`, a ``tokenizers.Tokenizer`` or a callable
            ``str -> list of ints``.

    With several processes (``Pipeline(shard_count=...)``) process ``i`` of ``n``
    tokenizes and packs documents ``i, i + n, i + 2n, ...`` of each pass into its own
    rows (hosts may serve different numbers of rows per pass).

    Example:
        >>> from datarax.text import PackedTextSource, PackedTextConfig
        >>> docs = lambda epoch: ["a b c", "d e", "f g h i j k"]
        >>> tok = lambda text: [ord(w) - 96 for w in text.split()]
        >>> source = PackedTextSource(PackedTextConfig(seq_len=4, open_rows=2), docs, tok)
        >>> batch = source.get_batch(8)
        >>> batch["tokens"].tolist()
        [[1, 2, 3, 0], [6, 7, 8, 9], [4, 5, 10, 11]]
        >>> batch["segment_ids"].tolist()
        [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 2, 2]]
        >>> source.get_batch(8) is None, round(source.packing_stats()["efficiency"], 3)
        (True, 0.917)
    """

    config: PackedTextConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: PackedTextConfig,
        documents: Any,
        tokenizer: Any,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, PackedTextConfig):
            raise ConfigError(
                f"PackedTextSource needs a PackedTextConfig, got {type(config).__name__}."
            )
        super().__init__(config, rngs=rngs, name=name)
        packer = Packer(
            config.seq_len,
            config.packing,
            config.open_rows,
            config.pad_id,
            config.with_document_index,
        )
        self._text = nnx.static(
            _TextPass(self, as_reader(documents), as_tokenizer(tokenizer), packer)
        )

    # ------------------------------------------------------------- contract
    def element_spec(self) -> dict[str, Any]:
        """int32 ``[seq_len]`` per row for each field (see :meth:`Packer.take`)."""
        fields = FIELDS + (("document_index",) if self.config.with_document_index else ())
        return {f: jax.ShapeDtypeStruct((self.config.seq_len,), jnp.int32) for f in fields}

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next (at most) ``batch_size`` packed rows of the pass, or None at its end."""
        return self.get_batch_with_indices(batch_size)[0]

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """Rows and their numbers in the pass (their stable index)."""
        text = self._text
        first = self.index
        text.follow(self.epoch, first)
        rows = text.take(batch_size)
        if rows is None:
            return None, None
        count = len(rows["tokens"])
        self.advance(count)
        text.at = (self.epoch, self.index)
        return rows, np.arange(first, first + count)

    def restart(self, epoch: int) -> None:
        """Stand at the first row of pass ``epoch`` (the reader opens lazily)."""
        self.seek(epoch, 0)
        self._text.open_fresh(epoch)

    def close_epoch(self) -> None:
        """Release the reader; the position is kept (the next read re-derives the pass)."""
        self._text.suspend()

    def close(self) -> None:
        self._text.suspend()

    def __iter__(self) -> PackedTextSource:
        self.check_contract()
        if self._text.ended and self._text.at == (self.epoch, self.index):
            self.seek(0, 0)
        return self

    # ------------------------------------------------------------ reporting
    def packing_stats(self) -> dict[str, Any]:
        """This pass so far: rows and tokens handed out, ``efficiency`` (non-padding
        share of the rows), documents packed and skipped."""
        return self._text.stats()

    def skipped_documents(self) -> list[SkippedRecord]:
        """Documents skipped under ``on_error="skip"`` since the source was built:
        pass, document number (``position`` and ``index``) and cause (``path`` names
        where the document is)."""
        return list(self._text.reports)

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Position, plus the packer snapshot of that position (module docstring)."""
        state = super().get_state()
        state.update(self._text.snapshot_at(self.epoch, self.index))
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state`` (from :meth:`get_state` of an identically built source).

        A state with only ``current_epoch`` / ``current_index`` is accepted too: the
        pass is then re-packed up to that row on the next read.
        """
        where = "PackedTextSource"
        if not isinstance(state, dict):
            raise StateError(
                f"{where}.set_state expects the dict get_state() returned, got "
                f"{type(state).__name__}."
            )
        epoch, index = self.datarax_position.check_state(state, where=where)
        extra = {k: state[k] for k in _SNAPSHOT_KEYS if k in state}
        if extra:
            for key in ("next_document", "skipped", "packer"):
                if key not in extra:
                    raise StateError(
                        f"{where} state is missing '{key}'; pass the dict get_state() "
                        f"returned (keys: {sorted(state)}).",
                        field=key,
                    )
            self._text.check_snapshot(extra)
        self._text.snapshot = (epoch, index, extra) if extra else None
        self.seek(epoch, index)
        self._text.follow(epoch, index)  # rebuild now: a foreign state fails here


_SNAPSHOT_KEYS = ("next_document", "skipped", "documents", "packer")


class _TextPass:
    """The open pass of a :class:`PackedTextSource`: reading, tokenizing, packing.

    ``at`` is the ``(epoch, rows handed out)`` this object stands at (None: nowhere);
    the source's position is the truth and :meth:`follow` moves this object to it.
    """

    def __init__(
        self, source: PackedTextSource, reader: Any, tokenizer: Any, packer: Packer
    ) -> None:
        self._source = source
        self.reader = reader
        self.tokenizer = tokenizer
        self.packer = packer
        self.policy = source.config.error_policy()
        self.reports: list[SkippedRecord] = []
        self.snapshot: tuple[int, int, dict[str, Any]] | None = None
        self.at: tuple[int, int] | None = None
        self._reset(0)
        self.at = None

    # ------------------------------------------------------------ lifecycle
    def _reset(self, epoch: int) -> None:
        self._it: Any = None  # opened lazily at _read_at
        self._epoch = epoch
        self._buffer: deque[tuple[int, Any]] = deque()
        self._read_at = 0  # pass index of the next document the iterator yields
        self.next_document = 0  # documents of the pass consumed by the packer
        self.skipped = 0
        self.documents = 0
        self.ended = False
        self.packer.reset()

    def open_fresh(self, epoch: int) -> None:
        """Stand at the start of pass ``epoch``."""
        self._reset(epoch)
        self.at = (epoch, 0)

    def suspend(self) -> None:
        """Release the reader; keep a snapshot so the position is re-derived cheaply."""
        if self.at is not None and self._it is not None:
            self.snapshot = (*self.at, self._extra())
        self._reset(self._epoch)
        self.at = None

    def follow(self, epoch: int, index: int) -> None:
        """Stand at row ``index`` of pass ``epoch`` (the source's position)."""
        if self.at == (epoch, index):
            return
        snapshot = self.snapshot
        if snapshot is not None and snapshot[:2] == (epoch, index):
            self._restore(epoch, snapshot[2])
        else:
            self.open_fresh(epoch)
            self._replay(index)
        self.at = (epoch, index)

    def _replay(self, rows: int) -> None:
        """Re-pack the pass from its start, discarding its first ``rows`` rows."""
        left = rows
        while left:
            self._fill(min(left, 1024))
            dropped = self.packer.drop(left)
            if dropped == 0:
                raise StateError(
                    f"PackedTextSource: the restored position says {rows} rows of pass "
                    f"{self._epoch} were handed out, but the pass packs only "
                    f"{rows - left} rows; the state comes from other documents or settings.",
                    field="current_index",
                )
            left -= dropped

    # -------------------------------------------------------------- reading
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
                break
            doc, ids = self._buffer.popleft()
            self.next_document = doc + 1
            if isinstance(ids, str):
                self._skip(doc, ids)
            else:
                packer.add(doc, ids)
                self.documents += 1
        if packer.ready:
            self.ended = False

    def _read_block(self) -> bool:
        """Read, check and tokenize the next block of this shard's documents."""
        if self._it is None:
            self._it = iter(self.reader.read(self._epoch, self._read_at))
        shard, count = self._source.shard
        block = self._source.config.tokenize_block
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
            self._bad(index, f"is {type(raw).__name__}, not str or bytes")
            return None
        if not raw.strip():
            self._bad(index, "is empty (no text)")
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
        budget = self.policy.max_skipped
        if budget is not None and self.skipped >= budget:
            raise RecordError(
                f"PackedTextSource: pass {self._epoch} would skip more than max_skipped="
                f"{budget} documents; the last one: {cause}. Fix the documents or raise "
                "max_skipped.",
                index=index,
            )
        self.skipped += 1
        self.reports.append(SkippedRecord(self._epoch, index, index, None, index, cause))

    # ---------------------------------------------------------------- state
    def stats(self) -> dict[str, Any]:
        extra = self._extra()
        if self.at is None and self.snapshot is not None:  # suspended: its snapshot
            extra = self.snapshot[2]
        rows, tokens = extra["packer"]["rows_packed"], extra["packer"]["tokens_packed"]
        return {
            "rows": rows,
            "tokens": tokens,
            "efficiency": tokens / (rows * self.packer.seq_len) if rows else 1.0,
            "documents": extra.get("documents", 0),
            "skipped": extra["skipped"],
        }

    def _extra(self) -> dict[str, Any]:
        return {
            "next_document": self.next_document,
            "skipped": self.skipped,
            "documents": self.documents,
            "packer": self.packer.get_state(),
        }

    def snapshot_at(self, epoch: int, index: int) -> dict[str, Any]:
        """The snapshot of row ``index`` of pass ``epoch`` if this object knows it."""
        if self.at == (epoch, index):
            return self._extra()
        if self.snapshot is not None and self.snapshot[:2] == (epoch, index):
            return dict(self.snapshot[2])
        if index == 0:
            return {
                "next_document": 0,
                "skipped": 0,
                "documents": 0,
                "packer": Packer(1).get_state(),
            }
        return {}  # unknown here: a restore re-packs the pass up to the position

    def check_snapshot(self, state: dict[str, Any]) -> None:
        """Refuse a malformed snapshot, naming the key."""
        where = "PackedTextSource"
        for key in ("next_document", "skipped", "documents"):
            value = state.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise StateError(
                    f"{where} state '{key}' must be an int >= 0, got {value!r}.", field=key
                )
        packer_state = state["packer"]
        try:
            needed = Packer.documents_in(packer_state)
            int(packer_state["tokens_packed"]), int(packer_state["rows_packed"])
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise StateError(
                f"{where} state 'packer' is malformed ({err!r}); pass the dict get_state() "
                "returned.",
                field="packer",
            ) from None
        next_document = state["next_document"]
        shard, count = self._source.shard
        for doc in sorted(needed, key=repr):
            if not (isinstance(doc, int) and 0 <= doc < next_document and doc % count == shard):
                raise StateError(
                    f"{where} state refers to document {doc!r}, which is not one of this "
                    f"shard's ({shard} of {count}) documents before next_document="
                    f"{next_document}; the state comes from another source or shard.",
                    field="packer",
                )

    def _restore(self, epoch: int, state: dict[str, Any]) -> None:
        """Rebuild pass ``epoch`` at a snapshot: re-read and re-tokenize the documents
        the open and ready rows reference, then continue reading at ``next_document``."""
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
                raise StateError(
                    f"{where} state says {next_document} documents of pass {epoch} were "
                    f"read, but the documents end after {index}; the state comes from "
                    "other documents.",
                    field="next_document",
                )
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
        self.skipped = state["skipped"]
        self.documents = state.get("documents", 0)


_END = object()
