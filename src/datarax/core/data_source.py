"""``DataSourceModule``: the contract every datarax source shares.

Three kinds (:class:`SourceKind`), each with its base:
:class:`~datarax.core.indexed.IndexedSource`,
:class:`~datarax.sources.random_access.RandomAccessSource`,
:class:`~datarax.core.stream.StreamSource`. A direct subclass gets its kind from the
method it defines (``get_batch_at`` or ``get_batch``). Base bookkeeping is name-mangled,
so subclasses may name their own fields freely.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flax import nnx

from datarax.core.batch import record_at
from datarax.core.config import SEED_SWITCHES, StructuralConfig, check_count, config_settings
from datarax.core.element import Element, RecordMetadata
from datarax.core.errors import SourceContractError
from datarax.core.lengths import length_or_none
from datarax.core.module import DataraxModule, HostState
from datarax.core.position import SourcePosition
from datarax.core.share import Share
from datarax.core.source_copy import deepcopy_module
from datarax.core.source_repr import source_repr
from datarax.typing import Batch

if TYPE_CHECKING:
    from flax.nnx.module import ModuleMeta as _ModuleClass
else:
    _ModuleClass = type(DataraxModule)


class SourceKind(enum.Enum):
    """How a source hands out records; decides the path a Pipeline runs it on."""

    INDEXED = "indexed"  # traceable get_batch_at: one compiled step per batch
    HOST = "host"  # random access on the host: get_batch_with_indices, read ahead
    STREAM = "stream"  # forward-only get_batch: read in order, fast-forward to resume


_KIND_BASES: dict[SourceKind, type] = {}
#: where each kind's base is defined: loaded when a class first needs it (``datarax.core``
#: imports its names on first use, so a user's stream class may come first)
_KIND_HOMES = {SourceKind.INDEXED: "datarax.core.indexed",
               SourceKind.STREAM: "datarax.core.stream"}


class _SourceClass(_ModuleClass):
    """Metaclass: a class of no kind defining ``get_batch_at`` (``get_batch``) is created
    deriving from the indexed (stream) base."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                **kwargs: Any) -> Any:
        kind = _defined_kind(bases, namespace, kwargs)
        if kind is not None:
            if kind not in _KIND_BASES:
                importlib.import_module(_KIND_HOMES[kind])  # registers its base
            base = _KIND_BASES[kind]
            bases = (tuple(base if b is DataSourceModule else b for b in bases)
                     if DataSourceModule in bases else (*bases, base))
        return super().__new__(mcs, name, bases, namespace, **kwargs)


def _defined_kind(bases: tuple[type, ...], namespace: dict[str, Any],
                  kwargs: dict[str, Any]) -> SourceKind | None:
    """The kind a class body gives a class of no kind yet (None: it has one, or none)."""
    if "kind_base" in kwargs or namespace.get("kind") is not None:
        return None
    if any(getattr(b, "kind", None) is not None for b in bases):
        return None
    if "get_batch_at" in namespace:
        return SourceKind.INDEXED
    if "get_batch" in namespace:
        return SourceKind.STREAM
    return None


class DataSourceModule(DataraxModule, metaclass=_SourceClass):
    """Base class of all data sources (an ``nnx.Module`` with the iterator protocol).

    Subclasses call ``super().__init__(config, rngs=rngs, name=name)`` first, then
    implement ``get_batch_at`` (indexed) or ``get_batch`` (stream) and
    ``element_spec()``, or subclass a kind base.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
        >>> source.kind.value, [int(e["x"]) for e in source]
        ('indexed', [0, 1, 2, 3])
        >>> source.get_state()
        {'current_index': 4, 'current_epoch': 0}
    """

    kind: ClassVar[SourceKind | None] = None
    __deepcopy__ = deepcopy_module
    #: attributes a copy does not deep-copy: shared, or built by its rebuild_after_copy(memo)
    rebuilt_on_copy: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, kind_base: SourceKind | None = None, **kwargs: Any) -> None:
        """``kind_base=``: the class is the base of that kind."""
        super().__init_subclass__(**kwargs)
        if kind_base is not None:
            cls.kind = kind_base
            _KIND_BASES[kind_base] = cls
            return
        if cls.kind is not None:
            cls._adopt_subclass()

    @classmethod
    def _adopt_subclass(cls) -> None:
        """Hook of the kind bases, run for each class of their kind as it is defined."""

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self.datarax_position = SourcePosition()
        self.__shard = Share()  # this process's share of every epoch
        self.__direct_end = _DirectEnd()

    # ------------------------------------------------------------------ contract
    def element_spec(self) -> dict[str, Any]:
        """Per-record keys, shapes and dtypes the source's batches carry."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement element_spec() to declare what its "
            "batches carry."
        )

    def spec_from_own_reads(self) -> bool:
        """Whether :meth:`element_spec` is read off the data the compiled reads gather,
        so the Pipeline's traced spec check can be skipped (default False)."""
        return False

    # -------------------------------------------------------------------- shard
    def set_shard(self, index: int, count: int, padded: bool = False) -> None:
        """Serve only share ``index`` of ``count`` of every epoch (Pipeline calls this);
        ``padded``: shares rounded up, not cut (:class:`~datarax.core.share.Share`)."""
        share = Share(index, count)
        self.__shard = Share(index, count, True) if padded and count > 1 else share
        self.datarax_position.retake_settings(self._state_settings)

    @property
    def shard(self) -> Share:
        """The :class:`~datarax.core.share.Share` of each epoch this source serves.

        Example:
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(10)})
            >>> source.set_shard(1, 4)
            >>> source.shard.index, source.shard.count, source.shard.bounds(len(source))
            (1, 4, (2, 4))
        """
        return self.__shard

    def epoch_size(self) -> int | None:
        """Records this shard serves per epoch (None when the length is unknown)."""
        n = length_or_none(self)
        return None if n is None else self.__shard.size(n)

    def order_settings(self) -> dict[str, Any]:
        """The settings deciding an epoch's order and content: a state restores only
        where they are equal. Default: the config's scalar fields.

        Example:
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> config = MemorySourceConfig(shuffle=True, seed=3)
            >>> MemorySource(config, {"x": np.arange(4)}).order_settings()
            {'shuffle': True, 'seed': 3}
        """
        return config_settings(self.config)

    def _state_settings(self) -> dict[str, Any]:
        """What a position restored with ``nnx.update`` must have been saved under:
        :meth:`order_settings`, class, share and record count (when known)."""
        settings = {"class": type(self).__name__, **self.order_settings(),
                    "shard": self.__share_setting()}
        try:
            records = len(self)
        except Exception:  # noqa: BLE001 - a stream, or a length known only once read
            return settings
        return {**settings, "records": int(records)}

    def __share_setting(self) -> str:
        share = self.__shard
        return f"{share.index} of {share.count}" + " padded" * share.padded

    def _saved_settings(self, *, restoring: bool = False) -> dict[str, Any]:
        """:meth:`order_settings` plus ``"shard"`` (``"0 of 2"``) when sharded, or always
        when ``restoring``."""
        settings = self.order_settings()
        share = self.__shard
        if restoring or share.count > 1 or share.padded:
            settings["shard"] = self.__share_setting()
        return settings

    # ----------------------------------------------------------------- position
    @property
    def epoch(self) -> int:
        """The pass the source stands in."""
        self.datarax_position.check_settings(self._state_settings, type(self).__name__)
        return self.datarax_position.epoch

    @property
    def index(self) -> int:
        """Records of that pass the consumer has received."""
        self.datarax_position.check_settings(self._state_settings, type(self).__name__)
        return self.datarax_position.index

    @epoch.setter
    def epoch(self, value: Any) -> None:
        self._refuse_position_attribute("epoch", value)

    @index.setter
    def index(self, value: Any) -> None:
        self._refuse_position_attribute("index", value)

    def _refuse_position_attribute(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__name__}.{name} = {value!r}: '{name}' is the source's position, "
            "read-only and kept by datarax (epoch, index). Give your own counter another "
            "name (e.g. self.pass_no), or stand the source elsewhere with "
            "seek(epoch, index)."
        )

    def seek(self, epoch: int, index: int = 0) -> None:
        """Stand at record ``index`` of pass ``epoch`` (the next record served); streams
        re-read the pass up to there."""
        epoch = check_count(epoch, f"{type(self).__name__}.seek epoch", 0)
        index = check_count(index, f"{type(self).__name__}.seek index", 0)
        self.datarax_position.seek(epoch, index)
        self.datarax_position.note_settings(self._state_settings)
        self._moved()

    def _moved(self) -> None:
        """Hook: the position was set from outside; kinds drop what depended on it."""

    def get_state(self) -> dict[str, Any]:
        """A small JSON-able dict: the position and ``settings``, the
        :meth:`order_settings` a restore must match.

        Example:
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> data = {"x": np.arange(4)}
            >>> state = MemorySource(MemorySourceConfig(shuffle=True, seed=1), data).get_state()
            >>> state  # doctest: +NORMALIZE_WHITESPACE
            {'current_index': 0, 'current_epoch': 0, 'settings': {'shuffle': True, 'seed': 1},
             'records': 4}
            >>> MemorySource(MemorySourceConfig(shuffle=True, seed=2), data).set_state(state)
            Traceback (most recent call last):
            ...
            datarax.core.errors.StateError: MemorySource state was saved with seed=1 but this source has seed=2; restore it into an identically built source.
        """
        state: dict[str, Any] = self.datarax_position.get_state()
        settings = self._saved_settings()
        if any(k not in SEED_SWITCHES or v for k, v in settings.items()):
            state["settings"] = settings
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` dict (on this or a freshly built source)."""
        epoch, index = self.datarax_position.check_state(
            state, length=self.epoch_size(), where=type(self).__name__,
            settings=self._saved_settings(restoring=True),
        )
        self.seek(epoch, index)

    def __getattr__(self, name: str) -> Any:
        """Attributes not found: hints for ``batch`` and a skipped base ``__init__``."""
        hint = _NOT_A_SOURCE_METHOD.get(name)
        if name in _SET_BY_BASE_INIT and "datarax_position" not in vars(self):
            hint = _NO_BASE_INIT.format(name=type(self).__name__)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}"
                             + (f": {hint}" if hint else ""), name=name, obj=self)

    def __repr__(self) -> str:
        return source_repr(self)

    # ---------------------------------------------------------------- resources
    def close(self) -> None:
        """Release what the source holds (reader threads, open files); safe to call twice."""

    def __enter__(self) -> DataSourceModule:
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close; an error closing is added as a note to the block's own error."""
        error = exc[1] if len(exc) > 1 else None
        if not isinstance(error, BaseException):
            self.close()
            return
        try:
            self.close()
        except Exception as err:  # noqa: BLE001 - the block's own error goes on
            error.add_note(f"closing the {type(self).__name__} also failed: "
                           f"{type(err).__name__}: {err}")

    # ---------------------------------------------------------- record iteration
    def _last_direct_pass(self) -> bool:
        """Whether the current pass is the last that direct iteration makes
        (``config.num_epochs`` passes; -1 unbounded)."""
        epochs = int(getattr(self.config, "num_epochs", 1))
        return epochs >= 0 and self.epoch + 1 >= epochs

    def _exhausted(self) -> bool:
        size = self.epoch_size()
        if size is None:  # known finished only where direct iteration read to the end
            ended = getattr(self, "_DataSourceModule__direct_end", None)
            return ended is not None and ended.at == self.datarax_position.where()
        return self._last_direct_pass() and self.index >= size

    def __iter__(self) -> DataSourceModule:
        """Iterate records from the current position; restarts a finished source."""
        check_contract(self)
        # so an nnx.state taken after direct iteration is refused by a source built otherwise
        self.datarax_position.note_settings(self._state_settings)
        if self._exhausted():
            self.seek(0, 0)
        return self

    def __next__(self) -> Any:
        check_contract(self)
        self.datarax_position.note_settings(self._state_settings)  # next() without iter()
        record, index = self._next_record()
        size = self.epoch_size()
        if size is not None and self.index >= size:  # this read ended the epoch
            self._note_direct_end()
        if getattr(self.config, "track_metadata", False):
            return Element(
                data=record,
                metadata=RecordMetadata(index=int(index), epoch=self.epoch, source=self.name),
            )
        return record

    def _note_direct_end(self) -> None:
        """Mark where direct reads ended an epoch."""
        ended = getattr(self, "_DataSourceModule__direct_end", None)
        if ended is not None:  # the next iter() starts over (see _exhausted)
            ended.at = self.datarax_position.where()
            ended.restores = self.datarax_position.restores

    def direct_pass_ended(self) -> bool:
        """Whether direct reads ended an epoch here and the position has not moved since
        (a Pipeline's next pass is then the next epoch)."""
        ended = getattr(self, "_DataSourceModule__direct_end", None)
        return (ended is not None and ended.at == self.datarax_position.where()
                and ended.restores == self.datarax_position.restores)

    def _next_record(self) -> tuple[Batch, int]:
        """The next record and its stable index (the indexed base overrides)."""
        read = self.get_batch_with_indices  # type: ignore[attr-defined]
        batch, indices = read(1)
        if batch is None:
            if self._last_direct_pass():
                self._note_direct_end()
                raise StopIteration
            self.seek(self.epoch + 1, 0)
            batch, indices = read(1)
            if batch is None:
                raise StopIteration
        index = self.index - 1 if indices is None else int(np.asarray(indices)[0])
        return record_at(batch, 0), index


_NOT_A_SOURCE_METHOD = {
    "batch": "sources do not batch; batching is the Pipeline's job: "
             "Pipeline(source=source, stages=[], batch_size=N, rngs=nnx.Rngs(0))",
}

_SET_BY_BASE_INIT = frozenset({"config", "name", "datarax_position"})
_NO_BASE_INIT = ("{name} was built without DataSourceModule.__init__, which gives a source "
                 "its position: call super().__init__(config, rngs=rngs, name=name) first in "
                 "its __init__.")


class _DirectEnd(HostState):
    """Where direct reads last ended an epoch (a source of unknown length knows it only
    by reading to the end)."""

    def __init__(self) -> None:
        self.at: tuple[int, int] | None = None
        self.restores = 0  # the position's restore count then: a restore there is no end


def check_contract(source: DataSourceModule) -> None:
    """Raise unless ``source`` is of a kind (implements ``get_batch_at`` or ``get_batch``).

    Example:
        >>> from datarax.core.config import StructuralConfig
        >>> class Nothing(DataSourceModule):
        ...     pass
        >>> check_contract(Nothing(StructuralConfig()))
        Traceback (most recent call last):
        ...
        datarax.core.errors.SourceContractError: Nothing implements neither get_batch_at(...) ...
    """
    name = type(source).__name__
    if source.kind is None:
        raise SourceContractError(
            f"{name} implements neither get_batch_at(start, size, key) "
            "(random access, compiled path) nor get_batch(batch_size) (forward-only "
            "streaming). Implement one of them to use it as a data source."
        )
    if getattr(source, "datarax_position", None) is None:  # set by DataSourceModule.__init__
        raise SourceContractError(_NO_BASE_INIT.format(name=name))
    problem = _call_problem(type(source))
    if problem is not None:
        raise SourceContractError(problem)


_CALL_PROBLEMS: weakref.WeakKeyDictionary[type, str | None] = weakref.WeakKeyDictionary()


def _call_problem(cls: type) -> str | None:
    """Why datarax cannot call ``cls``'s read method as it does, or None; once per class."""
    if cls not in _CALL_PROBLEMS:
        _CALL_PROBLEMS[cls] = None
        reads = {SourceKind.INDEXED: ("get_batch_at", (0, 1, None), "start, size, key=None"),
                 SourceKind.STREAM: ("get_batch", (1,), "batch_size")}
        if cls.kind in reads:
            method, arguments, form = reads[cls.kind]
            try:
                signature = inspect.signature(getattr(cls, method))
            except (AttributeError, TypeError, ValueError):  # not introspectable: not checked
                return None
            try:
                signature.bind(None, *arguments)  # None: self
            except TypeError:
                bare = signature.replace(  # the parameters' names only
                    parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                    return_annotation=signature.empty)
                _CALL_PROBLEMS[cls] = (
                    f"{cls.__name__}.{method}{bare} cannot be called as datarax calls "
                    f"it, {method}{arguments}: define it as {method}(self, {form}).")
    return _CALL_PROBLEMS[cls]


def skipping_setting(source: Any) -> str | None:
    """The first of ``source``'s order settings with ``on_error="skip"``, or None.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> skipping_setting(MemorySource(MemorySourceConfig(), {"x": np.arange(3)})) is None
        True
    """
    names = sorted(name for name, value in source.order_settings().items()
                   if name.split(".")[-1] == "on_error" and value == "skip")
    return names[0] if names else None
