"""Document readers: where the text a :class:`PackedTextSource` packs comes from.

A reader is a host object with ``read(epoch, start)`` (pass ``epoch``'s documents from
``start`` on: ``str``, UTF-8 ``bytes`` or a :class:`BadDocument`), ``describe(epoch, index)``
(for messages), ``num_documents()``, and optionally ``close()`` and ``settings()`` (what a
restore must match). Invariant: a pass yields the same documents in the same order for the
same ``epoch``, so a restore re-reads from a document index.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from datarax.core.errors import ConfigError
from datarax.host.specs import describe_field
from datarax.mixing import MixSource


@dataclass(frozen=True)
class BadDocument:
    """An entry a reader could not turn into text; ``reason`` says why."""

    reason: str


class DocumentReader(Protocol):
    """What :class:`PackedTextSource` and :class:`MixedDocuments` read documents from."""

    def read(self, epoch: int, start: int) -> Iterator[Any]: ...

    def describe(self, epoch: int, index: int) -> str: ...

    def num_documents(self) -> int: ...

    def close(self) -> None: ...


class FunctionDocuments:
    """Documents from ``fn(epoch)`` (or ``fn()``): a fresh, repeatable iterable per pass.

    Example:
        >>> docs = FunctionDocuments(lambda epoch: [f"doc {i} of pass {epoch}" for i in range(3)])
        >>> list(docs.read(1, 1)), docs.num_documents()
        (['doc 1 of pass 1', 'doc 2 of pass 1'], 3)
    """

    def __init__(self, fn: Callable[..., Iterable[Any]]) -> None:
        if not callable(fn):
            raise ConfigError(
                f"FunctionDocuments needs a function returning an iterable of documents per "
                f"pass, got {type(fn).__name__}."
            )
        self.fn = fn
        self._takes_epoch = _takes_argument(fn)
        self._count: int | None = None

    def __repr__(self) -> str:
        fn = getattr(self, "fn", None)
        return f"FunctionDocuments({getattr(fn, '__qualname__', type(fn).__name__)})"

    def _open(self, epoch: int) -> Iterable[Any]:
        docs = self.fn(epoch) if self._takes_epoch else self.fn()
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
            raise ConfigError(
                f"FunctionDocuments: the function returned {type(docs).__name__}; it must "
                "return an iterable of documents (e.g. a list of str or a generator)."
            )
        return docs

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        return itertools.islice(iter(self._open(epoch)), start, None)

    def describe(self, epoch: int, index: int) -> str:
        return f"document {index} of pass {epoch}"

    def settings(self) -> dict[str, Any]:
        """The function's name (a state restores only under the same function)."""
        name = getattr(self.fn, "__qualname__", type(self.fn).__qualname__)
        return {"reader": "FunctionDocuments", "function": name}

    def num_documents(self) -> int:
        """Documents of pass 0, counted once by reading it through."""
        if self._count is None:
            self._count = sum(1 for _ in self._open(0))
        return self._count

    def close(self) -> None:
        """Nothing to release: the function's iterables are dropped with their pass."""


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    required = [("keyword-only " if p.kind is p.KEYWORD_ONLY else "") + p.name for p in params
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(required) > 1 or any(" " in p for p in required):  # keyword-only: never given
        raise ConfigError(
            f"FunctionDocuments: the function {getattr(fn, '__qualname__', type(fn).__name__)} "
            f"needs {len(required)} argument{'s' * (len(required) > 1)} ({', '.join(required)}"
            "); it is called as fn(epoch) or fn(). Bind the others first (functools.partial) "
            "or give them defaults.")
    return bool(positional)


_FORWARD_HINT = (
    "read the text field of a source read forward (a Hugging Face stream, ArrayRecord, a "
    "MixSource ...) with HFStreamDocuments(source, field='text'); an indexed source (in "
    "memory, HFEagerSource) is read forward wrapped as ShuffleBufferSource(source, "
    "buffer_size=1) (its own order); texts in a list: pass `lambda epoch: texts`."
)


class HFStreamDocuments:
    """Documents from the text ``field`` of an :class:`~datarax.sources.HFStreamingSource`,
    or of any source read forward (ArrayRecord, ``MixSource``, ``ShuffleBufferSource`` ...).

    Resuming at document ``start`` reads past the ones before it. Give the source to this
    reader only (not also to a Pipeline); ``PackedTextSource`` shards the documents.

    Example:
        >>> from datarax.sources import HFStreamingSource, HFStreamingConfig
        >>> stream = HFStreamingSource(HFStreamingConfig(data_files="c.jsonl"))  # doctest: +SKIP
        >>> docs = HFStreamDocuments(stream, field="text")  # doctest: +SKIP
    """

    def __init__(self, source: Any, field: str = "text", chunk: int = 1024) -> None:
        if not all(hasattr(source, m) for m in ("seek", "get_batch_with_indices")):
            raise ConfigError(
                f"HFStreamDocuments reads a source forward (seek, get_batch_with_indices), "
                f"which {type(source).__name__} does not: {_FORWARD_HINT}"
            )
        spec = source.element_spec()
        if field not in spec:
            raise ConfigError(
                f"HFStreamDocuments: the stream has no field '{field}' (fields: "
                f"{sorted(spec)}); pass field= naming the text field."
            )
        held = spec[field]
        if hasattr(held, "dtype") or getattr(held, "shape", ()) != ():
            raise ConfigError(
                f"HFStreamDocuments: the field '{field}' holds {describe_field(held)}, not one "
                f"text per record (fields: "
                f"{ {k: describe_field(v) for k, v in sorted(spec.items())} }); pass field= "
                "naming the text field."
            )
        self.source = source
        self.field = field
        self.chunk = int(chunk)
        self._count: int | None = None
        # pass -> {document: record index less document index}, so messages name the record
        self._shifts: dict[int, dict[int, int]] = {}
        self._mixture = isinstance(source, MixSource)  # named by source and draw instead

    def __repr__(self) -> str:
        source = type(getattr(self, "source", None)).__name__
        return f"HFStreamDocuments({source}, field={getattr(self, 'field', None)!r})"

    def read(self, epoch: int, start: int) -> Iterator[Any]:
        self.source.seek(epoch, 0)
        skip, document, last = start, 0, 0
        shifts = self._shifts.setdefault(epoch, {})
        for old in [e for e in self._shifts if e < epoch - 1]:
            del self._shifts[old]
        while True:
            batch, indices = self.source.get_batch_with_indices(self.chunk)
            if batch is None:
                return
            values = batch[self.field]
            if not self._mixture:
                moved = np.asarray(indices) - np.arange(document, document + len(values))
                for j in np.flatnonzero(np.diff(moved, prepend=last)):
                    shifts[document + int(j)] = int(moved[j])
                last = int(moved[-1]) if len(moved) else last
            document += len(values)
            if skip >= len(values):
                skip -= len(values)
                continue
            yield from list(values)[skip:]
            skip = 0

    def describe(self, epoch: int, index: int) -> str:
        if self._mixture:
            name, draw = self.source.locate(index, epoch)
            return (f"draw {draw} of MixSource source '{name}' (record {index} of pass {epoch} "
                    f"of the mixture), its field '{self.field}'")
        shifts = self._shifts.get(epoch, {})
        at = max((d for d in tuple(shifts) if d <= index), default=None)  # read on a worker
        return (f"record {index + (shifts[at] if at is not None else 0)} of pass {epoch} "
                f"of the stream's field '{self.field}'")

    def settings(self) -> dict[str, Any]:
        """The field, the stream's class and its order settings (``source.shuffle`` ...)."""
        out: dict[str, Any] = {"reader": "HFStreamDocuments", "field": self.field,
                               "source": type(self.source).__name__}
        out.update((f"source.{k}", v) for k, v in self.source.order_settings().items())
        return out

    def num_documents(self) -> int:
        """Records of pass 0, counted once by reading it through."""
        if self._count is None:
            self._count = sum(1 for _ in self.read(0, 0))
        return self._count

    def close(self) -> None:
        """Close the stream source; a later read re-opens it."""
        self.source.close()


def reader_settings(reader: Any) -> dict[str, Any]:
    """What decides the documents of ``reader``'s passes: its ``settings()``, or its class.

    Example:
        >>> reader_settings(FunctionDocuments(lambda: ["a"]))
        {'reader': 'FunctionDocuments', 'function': '<lambda>'}
    """
    own = getattr(reader, "settings", None)
    return dict(own()) if callable(own) else {"reader": type(reader).__name__}


def close_reader(reader: Any) -> None:
    """Call ``reader.close()``; a reader without one holds nothing to release.

    Example:
        >>> close_reader(FunctionDocuments(lambda: ["a"]))  # nothing held: a no-op
    """
    closer = getattr(reader, "close", None)
    if callable(closer):
        closer()


def as_reader(documents: Any, who: str = "documents") -> Any:
    """``documents`` as a reader: readers pass through, functions are wrapped.

    Example:
        >>> list(as_reader(lambda: ["a", "b"]).read(0, 0))
        ['a', 'b']
    """
    if all(hasattr(documents, m) for m in ("read", "describe", "num_documents")):
        return documents
    if hasattr(documents, "element_spec"):
        raise ConfigError(
            f"{who} is a datarax source ({type(documents).__name__}), not a reader of "
            f"documents: {_FORWARD_HINT}"
        )
    if callable(documents):
        return FunctionDocuments(documents)
    raise ConfigError(
        f"{who} must be a reader (FunctionDocuments, JsonlDocuments, ParquetDocuments, "
        f"HFStreamDocuments, MixedDocuments) or a function returning an iterable per pass, got "
        f"{type(documents).__name__}. Wrap a list as `lambda epoch: my_list`."
    )
