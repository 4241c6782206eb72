"""``SourcePosition``: where a source is — the one copy of a read position in datarax.

Invariant: a position counts what the *consumer has received* of pass ``epoch``, never
what read-ahead has read. It lives in ``nnx.Variable`` attributes (0-d NumPy arrays),
so ``nnx.state`` carries it, Orbax saves it and ``nnx.update`` resumes it.

Example:
    >>> pos = SourcePosition()
    >>> pos.advance(3); pos.index, pos.epoch
    (3, 0)
    >>> pos.move(1, 0); pos.get_state()
    {'current_index': 0, 'current_epoch': 1}
    >>> pos.seek(0, 2); pos.where(), pos.restores
    ((0, 2), 1)
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.config import check_settings
from datarax.core.errors import ConfigError, StateError
from datarax.core.module import HostState
from datarax.host.counts import count_words


def _scalar(value: int) -> np.ndarray:
    return np.asarray(int(value), dtype=np.int64)


def refuse_pipeline_state(state: Any, where: str) -> None:
    """Raise :class:`StateError` when ``state`` is not a dict, or is a Pipeline's state,
    not a source's (named as such, with the call that restores it).

    Example:
        >>> refuse_pipeline_state({"current_index": 0, "current_epoch": 0}, "MySource")
        >>> refuse_pipeline_state({"version": 2, "epoch": 0, "position": 3, "settings": {}},
        ...                       "MySource")
        Traceback (most recent call last):
        ...
        datarax.core.errors.StateError: MySource.set_state got a Pipeline's state (the dict of pipeline.get_state() / iterator.get_state(): epoch, position, settings), not this source's. Restore it with pipeline.set_state(state) (or iterator.set_state(state)) on a pipeline built as before, or save source.get_state() to restore a source.
    """
    if not isinstance(state, dict):
        raise StateError(
            f"{where}.set_state expects the dict get_state() returned, got {type(state).__name__}.")
    if "current_index" in state:
        return
    if not {"epoch", "position", "settings"} <= set(state):
        return
    hint = (" (its 'source' entry is the source's own state)"
            if isinstance(state.get("source"), Mapping) else "")
    raise StateError(
        f"{where}.set_state got a Pipeline's state (the dict of pipeline.get_state() / "
        f"iterator.get_state(): epoch, position, settings), not this source's. Restore it "
        f"with pipeline.set_state(state) (or iterator.set_state(state)) on a pipeline "
        f"built as before, or save source.get_state() to restore a source{hint}.",
        field="current_index",
    )


_MISSING = object()


def _is_count(value: Any) -> bool:
    """Whether ``value`` is an int >= 0 (a NumPy integer counts; a bool does not)."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 0


def saved_count(
    state: Mapping[str, Any],
    name: str,
    where: str,
    *,
    allow_none: bool = False,
    at_most: int | None = None,
    meaning: str = "",
    default: Any = _MISSING,
) -> Any:
    """``state[name]``, a saved count, as an int; missing (without ``default``) or not an
    int in [0, ``at_most``] (or None where ``allow_none``) is refused, naming it,
    ``meaning`` and the owner ``where``.

    Example:
        >>> saved_count({"index": np.int64(3)}, "index", "MySampler")
        3
        >>> saved_count({"index": -1}, "index", "MySampler")
        Traceback (most recent call last):
        ...
        datarax.core.errors.StateError: MySampler state 'index' must be an int >= 0, got -1; pass the dict MySampler.get_state() returned.
    """
    value = state.get(name, default)
    if value is _MISSING:
        raise missing_key(state, name, where)
    if value is None and allow_none:
        return None
    if _is_count(value) and (at_most is None or value <= at_most):
        return int(value)
    bounds = "an int >= 0" if at_most is None else f"an int in [0, {at_most}]"
    raise StateError(
        f"{where} state '{name}' must be {bounds}{' or None' if allow_none else ''}"
        f"{f' ({meaning})' if meaning else ''}, got {value!r}; pass the dict "
        f"{where}.get_state() returned.",
        field=name,
    )


def missing_key(state: Mapping[str, Any], name: str, where: str) -> StateError:
    """The error for a state of ``where`` without the key ``name``."""
    return StateError(
        f"{where} state is missing '{name}'; pass the dict {where}.get_state() returned "
        f"(got keys {sorted(state)}).",
        field=name,
    )


def saved_counts(
    value: Any, name: str, where: str, size: int, meaning: str,
    total: tuple[str, int] | None = None,
) -> list[int]:
    """``value``, a saved list of ``size`` counts (adding up to ``total``'s value), as ints;
    anything else is refused naming ``name``, ``meaning`` and ``where``.

    Example:
        >>> saved_counts((2, np.int64(0)), "cursor", "MySource", 2, "position, offset")
        [2, 0]
    """
    if isinstance(value, (list, tuple)) and len(value) == size and all(
        _is_count(v) for v in value
    ) and (total is None or sum(value) == total[1]):
        return [int(v) for v in value]
    adding = "" if total is None else f", adding up to '{total[0]}' ({total[1]})"
    raise StateError(
        f"{where} state '{name}' must be a list of {size} ints >= 0 ({meaning}{adding}), "
        f"got {value!r}; pass the dict {where}.get_state() returned.",
        field=name,
    )


def past_the_end(
    owner: str,
    epoch: int,
    index: int,
    made_by: str = "another source",
    *,
    unit: str = "records",
    done: str = "handed out",
    holds: int | None = None,
    field: str = "current_index",
) -> StateError:
    """The error for a restored position past the end of pass ``epoch`` (which ends after
    ``holds``, where known); the state comes from ``made_by``.

    Example:
        >>> print(past_the_end("MySource", 0, 9))
        MySource: the restored position says 9 records of pass 0 were handed out, but the pass ends before that; the state comes from another source.
    """
    ends = "before that" if holds is None else f"after {holds}"
    one, were = (unit[:-1], "was") if index == 1 and unit.endswith("s") else (unit, "were")
    return StateError(
        f"{owner}: the restored position says {index} {one} of pass {epoch} {were} {done}, "
        f"but the pass ends {ends}; the state comes from {made_by}.",
        field=field,
    )


_FOR_OWNER: ContextVar[bool] = ContextVar("datarax_seek_for_owner", default=False)


@contextmanager
def seeking_for_owner() -> Iterator[None]:
    """Seeks made inside stand a child where its owner's position says (the owner was
    restored or sought, not the child): a child past its pass's end is worded as a
    restored position (:func:`past_the_end`), not as a seek of its own."""
    token = _FOR_OWNER.set(True)
    try:
        yield
    finally:
        _FOR_OWNER.reset(token)


def seek_is_for_owner() -> bool:
    """Whether a seek now is made inside :func:`seeking_for_owner`."""
    return _FOR_OWNER.get()


def seek_past_the_end(owner: str, epoch: int, index: int, *, unit: str = "records",
                      holds: int | None = None) -> StateError:
    """The error for ``owner.seek(epoch, index)`` past the end of pass ``epoch`` (which
    holds ``holds`` records, where known): which positions a seek may name.

    Example:
        >>> print(seek_past_the_end("MySource", 0, 9, unit="rows", holds=4))
        MySource.seek(0, 9) is past the end of pass 0: it holds 4 rows, the last is row 3 (seek(0, 4) stands at its end). Seek to a row up to 4.
    """
    one = unit[:-1] if unit.endswith("s") else unit
    if holds is None:
        size, up_to = f"it ends before {one} {index}", "an earlier " + one
    else:
        last = f", the last is {one} {holds - 1}" if holds else ""
        size = (f"it holds {count_words(holds, one, unit)}{last} (seek({epoch}, {holds}) "
                "stands at its end)")
        up_to = f"a {one} up to {holds}"
    return StateError(f"{owner}.seek({epoch}, {index}) is past the end of pass {epoch}: "
                      f"{size}. Seek to {up_to}.", field="current_index")


# Each ``name=value`` adds its CRC-32 to one slot per row, so a differing digest names
# the settings whose slots differ in every row. Small on purpose: it is nnx state.
SLOTS, HASHES = 4, 2
DIGEST_SIZE = SLOTS * HASHES + 1
#: settings added after states were saved without them: a state lacking them is accepted
#: (``fn_source``: a flat map's ``fn`` digest, before it compared by ``fn_name`` alone)
LATER_SETTINGS = ("records", "shard", "files", "fn_source")


def settings_digest(settings: Mapping[str, Any]) -> np.ndarray:
    """A fixed-size digest of a source's order settings (``DIGEST_SIZE`` uint32 values);
    the last is 1, so all zeros is a digest not taken yet.

    Example:
        >>> a = settings_digest({"seed": 1, "shuffle": True})
        >>> b = settings_digest({"shuffle": True, "seed": 1})
        >>> bool((a == b).all()), a.shape, differing_settings({"seed": 2, "shuffle": True}, a)
        (True, (9,), ['seed'])
    """
    out = np.zeros(DIGEST_SIZE, dtype=np.uint64)
    for name, value in settings.items():
        out[_slots(name)] += zlib.crc32(f"{name}={value!r}".encode())
    out[-1] = 1
    return (out % (1 << 32)).astype(np.uint32)


def later_setting(name: str) -> str | None:
    """The one of :data:`LATER_SETTINGS` that ``name`` is (or a child's), or None."""
    last = name.rsplit(".", 1)[-1]
    return last if last in LATER_SETTINGS else None


def without_later(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` less the :data:`LATER_SETTINGS` that ``saved`` lacks.

    Example:
        >>> without_later({"seed": 1}, {"seed": 1, "parts[0].files": "ab12"})
        {'seed': 1}
    """
    return {k: v for k, v in current.items() if k in saved or later_setting(k) is None}


def _earlier_forms(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``settings`` less each subset of the :data:`LATER_SETTINGS` they hold."""
    later = sorted({later_setting(k) for k in settings} - {None})
    return [{k: v for k, v in settings.items() if later_setting(k) not in dropped}
            for size in range(len(later) + 1) for dropped in itertools.combinations(later, size)]


def _slots(name: str) -> list[int]:
    return [row * SLOTS + zlib.crc32(f"{row}:{name}".encode()) % SLOTS for row in range(HASHES)]


def differing_settings(settings: Mapping[str, Any], saved: np.ndarray) -> list[str]:
    """Names of ``settings`` whose slots all differ between their digest and ``saved``
    (each setting that differs is among them)."""
    slots = {int(i) for i in np.flatnonzero(settings_digest(settings) != saved)}
    return [name for name in settings if slots.issuperset(_slots(name))]


def _host_int(variable: nnx.Variable) -> int:
    """A position Variable's value as an int, refusing a traced one (the pipeline or
    source was passed into a jitted function) with what to do instead."""
    try:
        return int(variable.get_raw_value())
    except jax.errors.ConcretizationTypeError as err:
        raise ConfigError(
            "a source's position (epoch, records handed out) was read while JAX traces a "
            "function: a Pipeline or source passed as an argument into jax.jit, nnx.jit or "
            "a jax.lax.scan carry holds traced values there. Iterate, step(), peek(), "
            "get_state() and read positions outside the traced function and pass the batch "
            "in (loss = train_step(model, pipeline.step())), or run the data and train steps "
            "as one program with pipeline.scan(train_step, length, modules)."
        ) from err


class _HostSide(HostState):
    """A position's non-NNX state: its seek count and the last digest found equal."""

    def __init__(self, placeholder: np.ndarray) -> None:
        self.seeks = 0
        self.placeholder = placeholder
        self.checked: Any = placeholder


class SourcePosition(nnx.Module):
    """Which pass over a source is running and how many records it has handed out;
    ``settings_var`` holds a digest of the owner's order settings, so a position
    restored with ``nnx.update`` into a source built otherwise is refused."""

    def __init__(self, epoch: int = 0, index: int = 0) -> None:
        self.epoch_var = nnx.Variable(_scalar(epoch))
        self.index_var = nnx.Variable(_scalar(index))
        placeholder = np.zeros(DIGEST_SIZE, dtype=np.uint32)
        self.settings_var = nnx.Variable(placeholder)
        self.__host = _HostSide(placeholder)

    def note_settings(self, settings: Callable[[], Mapping[str, Any]]) -> None:
        """Take the digest of ``settings()`` unless one is held already (taken, or
        restored with ``nnx.update``)."""
        if self.settings_var.get_raw_value() is self.__host.placeholder:
            digest = settings_digest(settings())
            self.settings_var.set_raw_value(digest)
            self.__host.checked = digest

    def retake_settings(self, settings: Callable[[], Mapping[str, Any]]) -> None:
        """Take the digest again (a new shard) unless a restored one is not checked yet."""
        value = self.settings_var.get_raw_value()
        if value is self.__host.checked or value is self.__host.placeholder:
            self.settings_var.set_raw_value(self.__host.placeholder)
            self.note_settings(settings)

    def check_settings(self, settings: Callable[[], Mapping[str, Any]], where: str) -> None:
        """Refuse settings that differ from the digest held, naming them (a restored
        digest is compared once)."""
        value = self.settings_var.get_raw_value()
        if value is self.__host.checked or value is self.__host.placeholder:
            return
        try:
            saved = np.asarray(value)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            return  # read inside a compiled step: checked on the host
        if saved.shape != (DIGEST_SIZE,) or not saved.any():
            self.__host.checked = value  # saved before its settings were taken
            return
        current = settings()
        if any(np.array_equal(saved, settings_digest(s)) for s in _earlier_forms(current)):
            self.__host.checked = value
            return
        names = differing_settings(current, saved)
        values = ", ".join(f"{n}={current[n]!r}" for n in names)
        what = (f"{values} differs" if len(names) == 1
                else f"one or more of {values} differ" if names
                else "a setting this source does not have differs")
        raise StateError(
            f"{where}: the position restored into it (nnx.update, or an Orbax restore of "
            f"nnx.state) was saved from a source built with other settings: {what} (this "
            "source's values). Rebuild the source as it was when the state was saved "
            "(a pipeline.get_state() dict restored with set_state names the saved values).",
            field=names[0] if names else None,
        )

    # raw accessors: read per batch on the host, outside any trace
    @property
    def epoch(self) -> int:
        return _host_int(self.epoch_var)

    @property
    def index(self) -> int:
        return _host_int(self.index_var)

    def where(self) -> tuple[int, int]:
        """``(epoch, index)`` in one read."""
        return _host_int(self.epoch_var), _host_int(self.index_var)

    def advance(self, count: int) -> None:
        """Count ``count`` more records as handed out in this pass."""
        self.index_var.set_raw_value(_scalar(self.index + int(count)))

    def move(self, epoch: int, index: int) -> None:
        """Stand at record ``index`` of pass ``epoch``."""
        held = self.epoch_var.get_raw_value()  # per batch: mostly the same pass
        if type(held) is not np.ndarray or held.dtype != np.int64 or held.shape != () \
                or int(held) != int(epoch):
            self.epoch_var.set_raw_value(_scalar(epoch))
        self.index_var.set_raw_value(_scalar(index))

    def seek(self, epoch: int, index: int) -> None:
        """:meth:`move` from outside the reading, counted in :attr:`restores`."""
        self.move(epoch, index)
        self.__host.seeks += 1

    @property
    def restores(self) -> int:
        """How many times the position was set from outside (:meth:`seek`)."""
        return self.__host.seeks

    def get_state(self) -> dict[str, int]:
        return {"current_index": self.index, "current_epoch": self.epoch}

    def check_state(
        self,
        state: dict[str, Any],
        *,
        length: int | None = None,
        where: str = "source",
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[int, int]:
        """``(epoch, index)`` of a :meth:`get_state` dict, refusing impossible values and
        ``settings`` that differ from the state's own."""
        refuse_pipeline_state(state, where)
        if settings is not None and "settings" in state:
            saved = state["settings"]
            current = without_later(saved, settings) if isinstance(saved, dict) else settings
            check_settings(saved, dict(current), where)
        passed = "" if length is None else f"records handed out of a pass of {length}"
        index = saved_count(state, "current_index", where, at_most=length, meaning=passed)
        return saved_count(state, "current_epoch", where), index
