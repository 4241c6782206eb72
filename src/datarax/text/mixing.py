"""``MixedDocuments``: several corpora drawn by weight into one document stream.

Draw ``g`` picks a corpus from ``numpy.random.default_rng([seed, g // BLOCK])``, so any
position is a pure function of ``(seed, g)`` and the mix keeps no state (docs/text.md).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datarax.core.children import close_each
from datarax.core.errors import ConfigError
from datarax.host.counts import check_count
from datarax.mixing.schedule import as_number
from datarax.text.documents import as_reader, close_reader, reader_settings

BLOCK = 1 << 16


def draw_edges(shares: np.ndarray) -> np.ndarray:
    """Upper edge of each corpus's slice of ``[0, 1)``; a corpus of share 0 gets none.

    The edges from the last corpus of nonzero share on are 1.0, so rounding never hands a
    trailing weight-0 corpus the sliver below 1.
    """
    edges = np.cumsum(shares)
    edges[int(np.flatnonzero(shares > 0)[-1]):] = 1.0
    return edges


class MixedDocuments:
    """Documents from ``corpora`` mixed by ``weights``; a pass is ``documents_per_epoch`` draws.

    Example:
        >>> mix = MixedDocuments(
        ...     {"a": lambda e: [f"a{i}" for i in range(3)], "b": lambda e: ["b0", "b1"]},
        ...     {"a": 0.5, "b": 0.5}, documents_per_epoch=6, seed=0)
        >>> docs = list(mix.read(0, 0)); len(docs), sorted(set(d[0] for d in docs))
        (6, ['a', 'b'])
        >>> list(mix.read(0, 4)) == docs[4:]
        True
    """

    def __init__(
        self,
        corpora: Mapping[str, Any],
        weights: Mapping[str, float],
        *,
        documents_per_epoch: int,
        seed: int = 0,
    ) -> None:
        for what, value in (("corpora", corpora), ("weights", weights)):
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"MixedDocuments {what} must be a dict keyed by corpus name, got "
                    f"{type(value).__name__} {value!r:.80}; e.g. corpora={{'web': reader, "
                    "'books': reader} and weights={'web': 0.8, 'books': 0.2}."
                )
        if not corpora:
            raise ConfigError("MixedDocuments needs at least one corpus.")
        if set(weights) != set(corpora):
            raise ConfigError(
                f"MixedDocuments weights name {sorted(weights)} but the corpora are "
                f"{sorted(corpora)}; give one weight per corpus."
            )
        weights = {name: as_number(w) for name, w in weights.items()}
        for name, w in weights.items():
            if (
                isinstance(w, (bool, np.bool_))
                or not isinstance(w, numbers.Real)
                or not w >= 0
                or w == float("inf")
            ):
                raise ConfigError(
                    f"MixedDocuments weight of corpus '{name}' must be a finite number >= 0, "
                    f"got {w!r}."
                )
        if sum(weights.values()) <= 0:
            raise ConfigError("MixedDocuments weights must not all be 0.")
        documents_per_epoch = check_count(
            documents_per_epoch, "MixedDocuments documents_per_epoch", 1)
        seed = check_count(seed, "MixedDocuments seed", 0)
        self.names = list(corpora)
        self.readers = [as_reader(corpora[n], f"MixedDocuments corpus '{n}'") for n in self.names]
        w = np.array([float(weights[n]) for n in self.names])
        if not np.isfinite(sum(w.tolist())):  # huge weights overflow their sum: scale first
            w = w / w.max()
        self.weights = np.round(w / w.sum(), 12)  # shares: 4:2 and 2:1 draw alike
        self._edges = draw_edges(self.weights)
        self.documents_per_epoch = documents_per_epoch
        self.seed = seed
        self._sizes: list[int] | None = None
        self._block_counts: dict[int, np.ndarray] = {}
        self._last_block: tuple[int, np.ndarray] = (-1, np.zeros(0, np.int32))

    def __repr__(self) -> str:
        if not hasattr(self, "seed"):  # __init__ raised
            return "MixedDocuments(not built)"
        shares = ", ".join(f"{n!r}: {float(w):g}" for n, w in zip(self.names, self.weights))
        return (f"MixedDocuments({{{shares}}}, documents_per_epoch="
                f"{self.documents_per_epoch}, seed={self.seed})")

    def _block(self, block: int) -> np.ndarray:
        if self._last_block[0] != block:
            u = np.random.default_rng([self.seed, block]).random(BLOCK)
            self._last_block = (
                block,
                np.searchsorted(self._edges, u, side="right").astype(np.int32),
            )
        return self._last_block[1]

    def choices(self, start: int, stop: int) -> np.ndarray:
        """Corpus number of each global draw in ``[start, stop)``."""
        parts = []
        g = start
        while g < stop:
            block, offset = divmod(g, BLOCK)
            take = min(stop - g, BLOCK - offset)
            parts.append(self._block(block)[offset : offset + take])
            g += take
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def draws_before(self, g: int) -> np.ndarray:
        """How many of draws ``[0, g)`` went to each corpus."""
        counts = np.zeros(len(self.names), np.int64)
        full, rest = divmod(g, BLOCK)
        for block in range(full):
            if block not in self._block_counts:
                self._block_counts[block] = np.bincount(
                    self._block(block), minlength=len(self.names)
                )
            counts += self._block_counts[block]
        if rest:
            counts += np.bincount(self._block(full)[:rest], minlength=len(self.names))
        return counts

    def sizes(self) -> list[int]:
        """Documents per pass of each corpus (read once; an empty corpus is refused)."""
        if self._sizes is None:
            self._sizes = [r.num_documents() for r in self.readers]
            for name, size, w, r in zip(self.names, self._sizes, self.weights, self.readers):
                if size == 0 and w > 0:
                    raise ConfigError(
                        f"MixedDocuments corpus '{name}' ({type(r).__name__}) holds no "
                        f"documents but has weight {w:g}. Check its reader (an empty file, "
                        "a function returning []?) or give it weight 0 to turn it off."
                    )
        return self._sizes

    def num_documents(self) -> int:
        return self.documents_per_epoch

    def settings(self) -> dict[str, Any]:
        """Weights as shares, documents per pass, seed, each corpus's settings (``corpora[i].``)."""
        out: dict[str, Any] = {
            "reader": "MixedDocuments",
            "weights": self.weights.tolist(),
            "documents_per_epoch": self.documents_per_epoch,
            "seed": self.seed,
        }
        for i, reader in enumerate(self.readers):
            out.update((f"corpora[{i}].{k}", v) for k, v in reader_settings(reader).items())
        return out

    def locate(self, epoch: int, index: int) -> tuple[int, int, int]:
        """``(corpus, corpus pass, document in it)`` of document ``index`` of pass ``epoch``."""
        g = epoch * self.documents_per_epoch + index
        corpus = int(self.choices(g, g + 1)[0])
        k = int(self.draws_before(g)[corpus])
        size = self.sizes()[corpus]
        return corpus, k // size, k % size

    def corpus_of(self, epoch: int, index: int) -> int:
        """The corpus number of document ``index`` of pass ``epoch`` (one draw, no reading)."""
        block, offset = divmod(epoch * self.documents_per_epoch + index, BLOCK)
        return int(self._block(block)[offset])

    def draws_in(self, epoch: int, stop: int, shard: int = 0, count: int = 1) -> list[int]:
        """Draws per corpus among documents ``shard, shard + count, ...`` below ``stop``
        of pass ``epoch`` (a host's share of the pass so far)."""
        g = epoch * self.documents_per_epoch
        picked = self.choices(g, g + stop)[shard::count]
        return np.bincount(picked, minlength=len(self.names)).tolist()

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        sizes = self.sizes()
        g0 = epoch * self.documents_per_epoch + start
        taken = self.draws_before(g0)
        open_at: list[tuple[int, Iterator[Any]] | None] = [None] * len(self.readers)
        stop = (epoch + 1) * self.documents_per_epoch
        g = g0
        while g < stop:
            chunk = self.choices(g, min(stop, g + BLOCK))
            for c in chunk.tolist():
                k = int(taken[c])
                corpus_epoch = k // sizes[c]
                if open_at[c] is None or open_at[c][0] != corpus_epoch:
                    open_at[c] = (corpus_epoch, self.readers[c].read(corpus_epoch, k % sizes[c]))
                try:
                    doc = next(open_at[c][1])
                except StopIteration:
                    raise ConfigError(
                        f"MixedDocuments corpus '{self.names[c]}' ended after {k % sizes[c]} "
                        f"documents in its pass {corpus_epoch}, but it held {sizes[c]} when "
                        "counted; every pass of a corpus must hold the same documents."
                    ) from None
                taken[c] += 1
                yield doc
            g += len(chunk)

    def describe(self, epoch: int, index: int) -> str:
        corpus, corpus_epoch, k = self.locate(epoch, index)
        inner = self.readers[corpus].describe(corpus_epoch, k)
        return f"corpus '{self.names[corpus]}' {inner}"

    def close(self) -> None:
        """Close every corpus's reader (all, then the first error); a later read reopens them."""
        close_each(functools.partial(close_reader, r) for r in self.readers)
