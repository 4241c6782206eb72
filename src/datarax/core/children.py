"""What a source built from other sources checks of them, and what it does to all of them.

A composite source reads its children through their public API, each at its own
position: each must be a data source, unsharded (the Pipeline shards the composite) and
a separate object.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    >>> check_children("ConcatSource", "part", ["0", "1"], [a, [1, 2]], whole="the concatenation")
    Traceback (most recent call last):
    ...
    datarax.core.errors.SourceContractError: ConcatSource part 1 is list, not a data source (a DataSourceModule such as MemorySource).
    >>> check_children("ConcatSource", "part", ["0", "1", "2"], [a, a, a], whole="the concatenation")
    Traceback (most recent call last):
    ...
    datarax.core.errors.SourceContractError: ConcatSource parts 0 and 1 are the same object; each part keeps its own position, so build a separate source for each entry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule, check_contract
from datarax.core.errors import ConfigError, SourceContractError
from datarax.core.reading import reading_of
from datarax.core.stream import StreamSource

__all__ = [
    "ChildSources",
    "check_child",
    "check_children",
    "check_distinct",
    "check_no_config",
    "child_settings",
    "close_each",
]


def check_child(owner: str, name: str, child: Any, *, whole: str, children: str) -> None:
    """Refuse a child that is not a data source, breaks the contract, or is sharded.

    Example:
        >>> check_child("FlatMapSource", "source", 3, whole="the flat-mapped source",
        ...             children="parent")
        Traceback (most recent call last):
        ...
        datarax.core.errors.SourceContractError: FlatMapSource source is int, not a data source (a DataSourceModule such as MemorySource).
    """
    if not isinstance(child, DataSourceModule):
        raise SourceContractError(
            f"{owner} {name} is {type(child).__name__}, not a data source "
            "(a DataSourceModule such as MemorySource)."
        )
    check_contract(child)
    if child.shard.count > 1:
        raise SourceContractError(
            f"{owner} {name} is sharded (share {child.shard.index} of {child.shard.count}); "
            f"shard {whole} (the Pipeline does), not its {children}."
        )


def check_no_config(owner: str, taken: Sequence[Any], extra: Sequence[Any], *, takes: str,
                    call: str, left_out: Sequence[str] = ()) -> None:
    """Refuse a composite source given a config or extra positional arguments (it builds
    its config from its children and keywords), or missing the keywords ``left_out``.

    Example:
        >>> from datarax.sources import ShuffleBufferSourceConfig
        >>> check_no_config("ShuffleBufferSource", (ShuffleBufferSourceConfig(buffer_size=4),),
        ...                 ([],), takes="the source", call="ShuffleBufferSource(source, buffer_size=...)")
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: ShuffleBufferSource takes the source, not its config (ShuffleBufferSourceConfig): it builds the config from its arguments. Call ShuffleBufferSource(source, buffer_size=...).
    """
    given = (*taken, *extra)
    configs = [type(v).__name__ for v in given if isinstance(v, StructuralConfig)]
    if configs:
        raise ConfigError(f"{owner} takes {takes}, not its config ({configs[0]}): it builds "
                          f"the config from its arguments. Call {call}.")
    if extra:
        raise ConfigError(f"{owner} takes {takes} as positional arguments, got {len(given)}; "
                          f"its settings are keywords. Call {call}.")
    if left_out:
        raise ConfigError(f"{owner} needs " + " and ".join(f"{k}=..." for k in left_out)
                          + f" (a keyword). Call {call}.")


def check_children(owner: str, kind: str, labels: Sequence[str], children: Sequence[Any], *,
                   whole: str) -> None:
    """:func:`check_child` for each child, then :func:`check_distinct`."""
    for label, child in zip(labels, children):
        check_child(owner, f"{kind} {label}", child, whole=whole, children=f"{kind}s")
    check_distinct(owner, kind, labels, children)


def check_distinct(owner: str, kind: str, labels: Sequence[str], children: Sequence[Any]) -> None:
    """Refuse a child object that appears twice in ``children``, naming both ``labels``.

    Example:
        >>> a, b = object(), object()
        >>> check_distinct("MixSource", "source", ["'a'", "'b'"], [a, b])  # distinct: passes
    """
    seen: dict[int, str] = {}
    for label, child in zip(labels, children):
        if id(child) in seen:
            raise SourceContractError(
                f"{owner} {kind}s {seen[id(child)]} and {label} are the same object; each {kind} "
                "keeps its own position, so build a separate source for each entry."
            )
        seen[id(child)] = label


def child_settings(prefix: str, child: Any, length: int | None) -> dict[str, Any]:
    """A child's type, length and :meth:`order_settings`, each named under ``prefix``.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
        >>> child_settings("parts[0].", a, 4)
        {'parts[0].source': 'MemorySource', 'parts[0].num_records': 4, 'parts[0].shuffle': False}
    """
    out: dict[str, Any] = {prefix + "source": type(child).__name__, prefix + "num_records": length}
    out.update((prefix + k, v) for k, v in child.order_settings().items())
    return out


def close_each(closers: Iterable[Callable[[], object]]) -> None:
    """Call every closer, even after one raised; then raise the first error, the later
    ones added as notes.

    Example:
        >>> closed = []
        >>> def fail():
        ...     raise OSError("disk gone")
        >>> try:
        ...     close_each([fail, lambda: closed.append("b")])
        ... except OSError as err:
        ...     print(err, closed)
        disk gone ['b']
    """
    first: BaseException | None = None
    for closer in closers:
        try:
            closer()
        except BaseException as err:  # noqa: BLE001 - re-raised below, after the others
            if first is None:
                first = err
            else:
                first.add_note(f"closing another part also failed: {type(err).__name__}: {err}")
    if first is not None:
        raise first


def stream_without_restart(source: Any, where: str = "") -> str | None:
    """The first stream in ``source`` or among its children, at any depth, that keeps the
    default ``restart`` (so it cannot read a pass twice), named with its place; or None."""
    name = f"{where}{type(source).__name__}"
    if isinstance(source, StreamSource) and type(source).restart is StreamSource.restart:
        return name
    return source.child_without_restart(name) if isinstance(source, ChildSources) else None


class ChildSources:
    """Mixin of a source built from ``_children()``: their step inputs and closing."""

    def child_without_restart(self, name: str) -> str | None:
        """:func:`stream_without_restart` of the children (``name``: this source's place)."""
        for i, child in enumerate(self._children()):
            if (found := stream_without_restart(child, f"{name} child {i}: ")) is not None:
                return found
        return None

    def _children(self) -> Sequence[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def step_inputs(self) -> Any:
        return tuple(c.step_inputs() for c in self._children())

    def epoch_step_inputs(self, epoch: int) -> Any:
        """:meth:`step_inputs` (each child reads its positions through its own cipher)."""
        return self.step_inputs()

    def has_host_fields(self) -> bool:
        return False

    def _child_names(self) -> Sequence[str]:
        """What :meth:`stats` calls each child: its place, ``"0"``, ``"1"``, ..."""
        return [str(i) for i in range(len(self._children()))]

    def stats(self) -> dict[str, Any] | None:
        """``{"children": {name: child.stats()}}`` of children with counters, or None."""
        counters = {}
        for name, child in zip(self._child_names(), self._children()):
            stats = getattr(child, "stats", None)
            child_stats = stats() if callable(stats) else None
            if child_stats:
                counters[name] = child_stats
        return {"children": counters} if counters else None

    def bind_step_inputs(self, inputs: Any) -> contextlib.AbstractContextManager[Any]:
        children = self._children()
        stack = contextlib.ExitStack()
        for child, child_inputs in zip(children, inputs or (None,) * len(children)):
            stack.enter_context(child.bind_step_inputs(child_inputs))
        return stack

    def close_epoch(self) -> None:
        """Stop the children's read-ahead (positions are kept)."""
        for child in self._children():
            if reading_of(child).closes_epoch:
                child.close_epoch()

    def close(self) -> None:
        """Close every child (:func:`close_each`)."""
        close_each(child.close for child in self._children())


def saved_place(source: Any) -> list[int] | None:
    """The ``place`` of a composite's ``cursor`` Variable (``[epoch, index, *place]``)
    when taken at the source's position, else None."""
    cursor = [int(v) for v in np.asarray(source.cursor.get_value())]
    return cursor[2:] if cursor[:2] == [source.epoch, source.index] else None


def restore_place(source: Any, place: Sequence[int]) -> None:
    """Set ``source.cursor`` to ``place`` (checked by the caller) at its position."""
    source.cursor.set_value(np.asarray([source.epoch, source.index, *place], np.int64))
