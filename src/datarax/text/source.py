"""``PackedTextSource``: documents -> tokens -> packed ``seq_len`` rows, as a stream.

Packing changes the number of records, so it is a source, not a per-batch stage; the work
is done by a :class:`~datarax.text.passes.TextPass`. The base's ``(epoch, index)`` is the
one truth: when it moves from outside, the pass is rebuilt before the next read, from a
matching snapshot or by re-packing up to that row (packing is deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core.children import close_each
from datarax.core.config import (
    StructuralConfig,
    check_bool,
    check_int,
    config_settings,
)
from datarax.core.data_source import check_contract
from datarax.core.errors import ConfigError
from datarax.core.stream import StreamSource
from datarax.host.counts import python_ints
from datarax.sources.read_ahead import SessionCursor
from datarax.sources.random_access import BadRecordFields
from datarax.sources.skip_ledger import SkippedRecord
from datarax.sources.source_call import MISSING, check_config_given, config_keyword, source_config
from datarax.text.documents import as_reader, close_reader, reader_settings
from datarax.text.packing import FIELDS, MODES, Packer
from datarax.text.passes import TextPass
from datarax.text.snapshots import SNAPSHOT_KEYS
from datarax.text.tokenize import as_tokenizer
from datarax.typing import Batch


@dataclass(frozen=True)
class PackedTextConfig(BadRecordFields, StructuralConfig):
    """Configuration of :class:`PackedTextSource`.

    Attributes:
        seq_len: tokens per packed row.
        packing: ``"first_fit"``, ``"best_fit"`` or ``"concat"`` (:mod:`datarax.text.packing`).
        open_rows: rows the fit modes keep open at once (more: fuller rows, a larger state).
        pad_id: id of padding in ``tokens`` and ``targets``.
        tokenize_block: documents encoded per tokenizer call.
        on_error: ``"raise"`` stops at a bad document (invalid UTF-8, not text, empty)
            with a :class:`RecordError` naming it; ``"skip"`` skips and counts it (a pass,
            or a mixture's corpus, whose every document is bad is still a RecordError).
        max_skipped: with ``"skip"``, most documents one pass may skip (None: no limit).
        with_document_index: also serve ``document_index`` (each token's document
            number in the pass, -1 on padding).
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
        if self.pad_id > (1 << 31) - 1:
            raise ConfigError(f"PackedTextConfig.pad_id must fit int32 (the rows are int32), "
                              f"got {self.pad_id}.")
        check_int(self, "tokenize_block", minimum=1)
        check_bool(self, "with_document_index")
        if self.packing not in MODES:
            raise ConfigError(
                f"PackedTextConfig.packing must be one of {list(MODES)}, got {self.packing!r}."
            )
        self.error_policy()


class PackedTextSource(StreamSource):
    """Packed token rows from documents, tokenized on the host, as a forward-only stream.

    Args:
        config: a :class:`PackedTextConfig`.
        documents: a reader (:mod:`datarax.text.documents`, ``MixedDocuments``) or a
            function returning the same documents of a pass each call (``fn(epoch)`` or ``fn()``).
        tokenizer: a :class:`TextTokenizer`, a ``tokenizers.Tokenizer`` or a callable
            ``str -> list of ints``.

    Process ``i`` of ``n`` (``Pipeline(shard_count=...)``) packs documents ``i, i + n, ...``
    of each pass into its own rows (hosts may serve different numbers of rows).

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
    config_class = PackedTextConfig

    def __init__(
        self,
        config: PackedTextConfig = MISSING,
        /,
        documents: Any = MISSING,
        tokenizer: Any = MISSING,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        call = ("PackedTextSource(PackedTextConfig(seq_len=512), documents, tokenizer) or "
                "PackedTextSource(documents=..., tokenizer=..., seq_len=512)")
        # config positional-only: config= or more arguments reach config_keyword's ConfigError
        config = config_keyword("PackedTextSource", config, (documents, tokenizer), extra,
                                settings, data_name=("documents", "tokenizer"), forms=call)
        config = source_config(type(self), config, settings)
        check_config_given("PackedTextSource", config, PackedTextConfig, call)
        if not isinstance(config, PackedTextConfig):
            raise ConfigError(
                f"PackedTextSource needs a PackedTextConfig, got {type(config).__name__}."
            )
        missing = [n for n, v in (("documents", documents), ("tokenizer", tokenizer))
                   if v is MISSING]
        if missing:
            raise ConfigError(
                f"PackedTextSource needs its {' and '.join(missing)} after the settings. "
                f"Call {call}.")
        super().__init__(config, rngs=rngs, name=name)
        packer = Packer(
            config.seq_len,
            config.packing,
            config.open_rows,
            config.pad_id,
            config.with_document_index,
        )
        self._text = nnx.static(
            TextPass(
                as_reader(documents),
                as_tokenizer(tokenizer),
                packer,
                config.error_policy(),
                shard=lambda: (self.shard.index, self.shard.count),
                block=config.tokenize_block,
            )
        )

    def element_spec(self) -> dict[str, Any]:
        """int32 ``[seq_len]`` per row for each field (see :meth:`Packer.take`)."""
        fields = FIELDS + (("document_index",) if self.config.with_document_index else ())
        return {f: jax.ShapeDtypeStruct((self.config.seq_len,), jnp.int32) for f in fields}

    def known_spec(self) -> dict[str, Any]:
        """The spec (for ``repr``): known without reading further."""
        return self.element_spec()

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next (at most) ``batch_size`` packed rows of the pass, or None at its end."""
        return self.get_batch_with_indices(batch_size)[0]

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """Rows and their numbers in the pass (their stable index), handed out at once."""
        with self._text.sessions.lock:
            return self.batch_cursor().take(batch_size)

    def batch_cursor(self) -> SessionCursor:
        """A :class:`~datarax.sources.read_ahead.SessionCursor` packing rows ahead of the
        position (ends any earlier session)."""
        return SessionCursor(self, self._text, self._text.start(self.epoch, self.index))

    def restart(self, epoch: int) -> None:
        """Stand at the first row of pass ``epoch`` (the reader opens lazily)."""
        with self._text.sessions.lock:
            self._text.direct()
            self.seek(epoch, 0)
            self._text.open_fresh(epoch)

    def seek(self, epoch: int, index: int = 0) -> None:
        """Stand at row ``index`` of pass ``epoch``; one past the pass's end is refused on
        the next read, worded as this seek (a wrapper's stand or a re-seek in place after
        ``nnx.update`` keeps the restored wording)."""
        super().seek(epoch, index)
        self._text.sought = self._sought()

    def close_epoch(self) -> None:
        """Release the reader; the position is kept (the next read re-derives the pass)."""
        self._text.suspend(at=(self.epoch, self.index))

    def close(self) -> None:
        """Release and close the reader, keeping the position (idempotent; reads reopen it).

        Example:
            >>> with PackedTextSource(PackedTextConfig(seq_len=4), lambda: ["a b"],
            ...                       lambda text: [1] * len(text.split())) as source:
            ...     source.get_batch(1)["tokens"].tolist()
            [[1, 1, 0, 0]]
        """
        at = (self.epoch, self.index)
        close_each([lambda: self._text.suspend(at=at), lambda: close_reader(self._text.reader)])

    def __iter__(self) -> PackedTextSource:
        check_contract(self)
        if self._text.ended and self._text.at == (self.epoch, self.index):
            self.seek(0, 0)
        return self

    def packing_stats(self) -> dict[str, Any]:
        """This pass so far: rows, tokens, ``efficiency`` (non-padding share), documents,
        skips (and, for a mixture, ``corpus_documents``)."""
        text = self._text
        at = (self.epoch, self.index)
        with text.sessions.lock:
            if text.at != at and not text.snapshot_at(*at):
                text.direct()
                text.follow(*at)
            return text.stats(at=at)

    def skipped_documents(self) -> list[SkippedRecord]:
        """Documents skipped under ``on_error="skip"`` since the source was built."""
        return list(self._text.ledger.reports)

    def order_settings(self) -> dict[str, Any]:
        """The packing settings, the documents' (``documents.files``,
        ``documents.corpora[1].seed`` ...) and the tokenizer's (``tokenizer.eos_id``)."""
        out = config_settings(self.config)
        out.pop("tokenize_block")  # how many documents are encoded at once: same ids
        out.update((f"documents.{k}", v) for k, v in reader_settings(self._text.reader).items())
        out.update((f"tokenizer.{k}", v) for k, v in self._text.tokenizer.settings().items())
        return out

    def get_state(self) -> dict[str, Any]:
        """Position, its packer snapshot and the :meth:`order_settings` a restore must match."""
        state = super().get_state()
        state.update(self._text.snapshot_at(self.epoch, self.index))
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state`` (from :meth:`get_state` of an identically built source); a
        bare position is re-packed up to that row, differing ``settings`` are refused."""
        where = "PackedTextSource"
        epoch, index = self.datarax_position.check_state(
            state, where=where, settings=self._saved_settings(restoring=True)
        )
        extra = {k: python_ints(state[k]) for k in SNAPSHOT_KEYS if k in state}
        if extra:
            self._text.check_snapshot({**state, **extra})
        with self._text.sessions.lock:
            self._text.direct()
            self._text.snapshot = (epoch, index, extra) if extra else None
            self.seek(epoch, index)
            self._text.sought = None  # a restore: past the end is worded as one, now and later
            self._text.follow(epoch, index, restoring=True)  # a foreign state fails here
