"""``MemorySource``: records already in memory, served on the compiled path.

Numeric fields live on the device and are gathered inside the compiled step; text
fields (numpy ``str``/``object`` arrays, lists of ``str``) stay on the host and are
gathered by the same record indices (shuffle, shards and resume cover them alike).
Nested dicts of fields are nested fields, named by path (``"meta/id"``) in messages
(the data is turned into columns by :mod:`datarax.sources.memory_columns`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import gather_rows
from datarax.core.config import StructuralConfig, check_bool, check_seed
from datarax.core.dtypes import is_64bit, text_kind
from datarax.core.errors import StateError
from datarax.core.indexed import IndexedSource, position_dtype
from datarax.core.position import saved_count
from datarax.core.keys import check_rngs
from datarax.core.spec import TextSpec, array_to_spec_strip_leading
from datarax.host.counts import count_words
from datarax.samplers.index_shuffle import epoch_permutation_jnp, index_shuffle_np
from datarax.sources.memory_columns import DeviceColumn, Path, flatten, to_columns, unflatten
from datarax.sources.order_tables import placed_order, placed_order_ahead
from datarax.sources.source_call import (
    MISSING,
    check_config_and_data,
    config_keyword,
    source_config,
)
from datarax.typing import Batch

#: a shuffled source of up to this many records reads an epoch through a table of its
#: order built on the host (:mod:`datarax.sources.order_tables`)
SHUFFLE_TABLE_MAX = 1 << 17

#: the calls MemorySource accepts, named when its arguments are mixed up
_CALL_FORMS = ("MemorySource(MemorySourceConfig(), data), MemorySource(config=MemorySourceConfig(), "
               "data=data) or MemorySource(data=data, shuffle=...) (settings as keywords)")


@dataclass(frozen=True)
class MemorySourceConfig(StructuralConfig):
    """Configuration of :class:`MemorySource`.

    Attributes:
        shuffle: serve records in a Feistel permutation, new each epoch (``seed + epoch``).
        seed: the permutation seed (an int in ``[0, 2**32)``), used when the source is
            built without ``rngs``; with ``rngs`` the order is seeded from ``rngs``.
        track_metadata: direct iteration yields :class:`~datarax.core.element.Element`
            objects carrying ``RecordMetadata`` (stable index, epoch, source name); a
            Pipeline's batches carry none.
        num_epochs: passes that direct iteration makes; ``-1`` unbounded (a Pipeline
            runs one pass per ``iter(pipeline)``).
        cast_float64: cast ``float64`` (``complex128``) fields to ``float32``
            (``complex64``) while ``jax_enable_x64`` is off; without it they are refused.
    """

    shuffle: bool = False
    seed: int = 42
    track_metadata: bool = False
    num_epochs: int = 1
    cast_float64: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "shuffle")
        check_seed(self, "seed")
        check_bool(self, "track_metadata")
        check_bool(self, "cast_float64")


class MemorySource(IndexedSource):
    """Records held in memory; an indexed source (compiled pipeline path).

    ``data`` is a dict of equal-length arrays (records along axis 0; a nested dict
    gives nested fields) or a sequence of records, each a dict of scalars, arrays or
    strings. Values follow :mod:`datarax.core.dtypes` while ``jax_enable_x64`` is off:
    64-bit ints narrowed to ``int32`` when every value fits (else refused, naming the
    value), ``float64`` refused unless ``cast_float64=True``. Text fields stay on the
    host and reach batches as lists of ``str`` (the stages then run on the host).

    With ``rngs`` (and ``shuffle=True``) the permutation seed is drawn from ``rngs``
    (its ``shuffle`` stream, else ``default``) and stored as ``config.seed``; build the
    source the same way to resume it. ``nnx.state(source)`` holds the position and the
    seed, not the records; the source keeps its own copy of NumPy data
    (:mod:`datarax.core.owned`).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)])
        >>> len(src), src.get_batch_at(3, 2)["x"].tolist()
        (5, [3, 4])
        >>> words = MemorySource(MemorySourceConfig(), {"id": np.arange(3), "word": ["a", "b", "c"]})
        >>> words.data["id"].dtype, words.get_batch_at(1, 2)["word"]
        (dtype('int32'), ['b', 'c'])
    """

    config: MemorySourceConfig  # pyright: ignore[reportIncompatibleVariableOverride]
    config_class = MemorySourceConfig

    def __init__(
        self,
        config: MemorySourceConfig = MISSING,
        /,
        data: Mapping[str, Any] | Sequence[Any] = MISSING,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        # positional-only: a mix-up gets a ConfigError naming the forms, not a TypeError
        config = config_keyword("MemorySource", config, data, extra, settings,
                                data_name="data", forms=_CALL_FORMS)
        config = source_config(type(self), config, settings)
        # a subclass (HFEagerSource ...) checks its own config and passes it on
        expected = MemorySourceConfig if type(self) is MemorySource else StructuralConfig
        check_config_and_data("MemorySource", config, expected, data, data_name="data",
                              call="MemorySource(MemorySourceConfig(), data=...)")
        if rngs is not None and config.shuffle:  # the drawn seed: config.seed, in states
            config = dataclasses.replace(config, seed=_draw_seed(rngs))
        super().__init__(config, rngs=rngs, name=name)
        flat = to_columns(data, config.cast_float64)
        device = {p: v for p, v in flat.items() if isinstance(v, DeviceColumn)}
        host = {p: v for p, v in flat.items() if isinstance(v, np.ndarray)}
        self.__store = _ColumnStore(device, host, list(flat))
        first = next(iter(flat.values()))
        self.__length = len(first.rows if isinstance(first, DeviceColumn) else first)
        # The seed travels as data, not as a constant baked into the compiled step.
        self.permutation_seed = nnx.Variable(np.asarray(config.seed, np.uint32))

    def __len__(self) -> int:
        return self.__length

    def get_state(self) -> dict[str, Any]:
        """The position and settings; a shuffled source adds ``records``, its number of
        records, so :meth:`set_state` refuses a state of another count.

        Example:
            >>> src = MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"x": np.arange(4)})
            >>> src.get_state()["records"]
            4
            >>> MemorySource(MemorySourceConfig(shuffle=True, seed=1),
            ...              {"x": np.arange(5)}).set_state(src.get_state())
            Traceback (most recent call last):
            ...
            datarax.core.errors.StateError: MemorySource state was saved with records=4 but this source holds 5 records; its shuffled order is a permutation of its records, so the position would serve some records twice and others never. Restore it into a source of the same records.
        """
        state = super().get_state()
        if getattr(self.config, "shuffle", False):
            state["records"] = len(self)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` dict; one saved with another number of
        records (``records``) is refused."""
        if isinstance(state, dict) and "records" in state:
            where = type(self).__name__
            saved = saved_count(state, "records", where, meaning="the records shuffled")
            if saved != len(self):
                raise StateError(
                    f"{where} state was saved with records={saved} but this source "
                    f"holds {count_words(len(self), 'record')}; its shuffled order is a "
                    "permutation of its "
                    "records, so the position would serve some records twice and others "
                    "never. Restore it into a source of the same records.",
                    field="records",
                )
        super().set_state(state)

    @property
    def data(self) -> dict[str, Any]:
        """The device fields in the records' own shape, records along axis 0 (inside the
        compiled step: its arguments); text fields are in :attr:`host_data`."""
        return self.__store.shaped(self.__store.current())

    @property
    def host_data(self) -> dict[str, np.ndarray]:
        """The text fields kept on the host, by path (``"meta/name"``): ``object`` arrays."""
        return {"/".join(p): v for p, v in self.__store.host.items()}

    def step_inputs(self) -> dict[str, Any]:
        return self.__store.columns

    def epoch_step_inputs(self, epoch: int) -> Any:
        """:meth:`step_inputs` for a step that keeps only records of epoch ``epoch``. A
        shuffled source of up to ``SHUFFLE_TABLE_MAX`` records adds that epoch's order
        (the same permutation, built on the host): the step gathers from it instead of
        running the Feistel cipher, which takes most of its compile.

        >>> src = MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"x": np.arange(4)})
        >>> columns, order = src.epoch_step_inputs(1)
        >>> int(order["base"]), order["order"].tolist() == src.record_indices_at(4, 4).tolist()
        (4, True)
        """
        n = self.__length
        if (not self.config.shuffle or n > SHUFFLE_TABLE_MAX or not self.reads_by_position()
                or (epoch + 1) * n > np.iinfo(np.int32).max):
            return self.step_inputs()
        seed = (int(self.permutation_seed.get_value()) + int(epoch)) % 2**32
        position = position_dtype()
        # on the device once (a NumPy argument is copied there at every call), and the
        # next epoch's made and placed ahead while this one runs
        order = placed_order(n, seed, position(epoch * n))
        if (epoch + 2) * n <= np.iinfo(np.int32).max:
            placed_order_ahead(n, (seed + 1) % 2**32, position((epoch + 1) * n))
        return (self.__store.columns, order)

    def bind_step_inputs(self, inputs: Any) -> contextlib.AbstractContextManager[None]:
        if isinstance(inputs, tuple):  # epoch_step_inputs' columns and epoch order
            return self.__store.bind(inputs[0], inputs[1])
        return self.__store.bind(inputs)

    def forget_records(self) -> None:
        """Keep only the device records' layout, on a twin made by
        :func:`~datarax.core.step_cache.split_for_step`: a graph definition split from it
        then holds no data, and a compiled step cached under it keeps none. Not for a
        source you read: it drops the source's device records."""
        self.__store = self.__store.layout()

    def pin_records(self) -> None:
        """Keep the records but compare equal only to this source's own, on a twin whose
        records the step does not receive as arguments (a user's source or stage holding
        this one): traced as constants, so a step cached under it serves no other records."""
        self.__store = self.__store.pinned()

    def has_host_fields(self) -> bool:
        return bool(self.__store.host)

    def with_host_fields(self, batch: Batch, start: int, size: int) -> tuple[Batch, np.ndarray]:
        indices = self._host_indices(start, size)
        return self.__store.merge(batch, indices), indices

    def _host_indices(self, start: int, size: int) -> np.ndarray:
        """``record_indices_at(start, size)`` computed with NumPy (same permutation)."""
        positions = np.arange(size, dtype=np.int64) + int(start)
        within = positions % self.__length
        if not self.config.shuffle:
            return within
        epochs = positions // self.__length
        seed = int(self.permutation_seed.get_value())
        return index_shuffle_np(within, self.__length - 1, (seed + epochs) % 2**32)

    def _positions_to_indices(self, positions: Any) -> Any:
        """Map global positions to record indices (shuffled per epoch when enabled)."""
        if not self.config.shuffle:
            return positions % self.__length
        order = self.__store.bound_order()
        if order is not None:  # one epoch's order (epoch_step_inputs): rows past it dropped
            within = positions - order["base"].astype(positions.dtype)
            # lax.clamp, not jnp.clip: jnp.clip is a jitted wrapper, traced once more
            within = jax.lax.clamp(np.asarray(0, within.dtype), within,
                                   np.asarray(self.__length - 1, within.dtype))
            return gather_rows(order["order"], within)
        return epoch_permutation_jnp(positions, self.__length, self.permutation_seed.get_value())

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index (position in ``data``) of each record ``get_batch_at`` serves:
        traced, in ``jnp``; with a concrete ``start``, the same permutation in NumPy
        (nothing compiled per call)."""
        if not isinstance(start, jax.core.Tracer):
            return jnp.asarray(self._host_indices(int(start), size), dtype=position_dtype())
        # start's own dtype (int64 under x64): a user's strict dtype promotion refuses int32 + int64
        return self._positions_to_indices(jnp.arange(size, dtype=start.dtype) + start)

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        """``size`` records from global position ``start`` (wrapping into the next epoch);
        inside a compiled step the device fields only (the pipeline adds the text)."""
        return self.__read(start, size, key)[0]

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """The batch and its stable indices, the shuffle computed once."""
        if type(self).get_batch_at is not MemorySource.get_batch_at:  # a subclass reads
            return super().get_batch_and_indices_at(start, size, key)
        return self.__read(start, size, key)

    def __read(self, start: Any, size: int, key: Any | None) -> tuple[Batch, Any]:
        # MemorySource's own read: a subclass's get_batch_at may call super() into it
        indices = self.record_indices_at(start, size, key)
        batch = self.__store.shaped(_map(lambda v: gather_rows(v, indices), self.__store.current()))
        if self.__store.host and not isinstance(indices, jax.core.Tracer):
            batch = self.__store.merge(batch, np.asarray(indices))
        return batch, indices

    def reads_by_position(self) -> bool:
        """True: a record is a function of its position (a subclass reading otherwise: False)."""
        cls = type(self)
        return all(
            getattr(cls, name) is getattr(MemorySource, name)
            for name in ("get_batch_at", "get_batch_and_indices_at", "record_indices_at",
                         "_positions_to_indices")
        )

    def spec_from_own_reads(self) -> bool:
        """True where :meth:`element_spec` and the reads are MemorySource's own: the spec
        is read off the columns the reads gather, so a Pipeline need not trace
        ``get_batch_at`` to compare them."""
        return type(self).element_spec is MemorySource.element_spec and self.reads_by_position()

    def known_spec(self) -> dict[str, Any]:
        """The spec, from the columns held (for ``repr``)."""
        return self.element_spec()

    @property
    def built_with_x64(self) -> bool:
        """True when its columns hold 64-bit numbers: it was built while ``jax_enable_x64``
        was on (otherwise the dtype policy made them 32-bit) and keeps those dtypes."""
        specs = jax.tree.leaves(self.__store.shaped_specs())
        return type(self).element_spec is MemorySource.element_spec and any(
            is_64bit(s.dtype) for s in specs)

    def element_spec(self) -> dict[str, Any]:
        device = _map(array_to_spec_strip_leading, self.__store.shaped_specs())
        return self.__store.merge_specs(device)

    def _read_record(self, epoch: int, index: int) -> tuple[Batch, int]:
        n = self.__length
        if self.config.shuffle:
            seed = (int(self.permutation_seed.get_value()) + epoch) % 2**32
            stable = int(index_shuffle_np(np.asarray([index]), n - 1, seed)[0])
        else:
            stable = index
        record = self.__store.shaped(_map(lambda v: v[stable], self.__store.current()), single=True)
        return self.__store.merge(record, stable, single=True), stable


def _reshape(value: Any, shape: tuple[int, ...]) -> Any:
    return value if tuple(value.shape) == tuple(shape) else value.reshape(shape)


def _map(fn: Any, tree: Mapping[str, Any]) -> dict[str, Any]:
    """``fn`` on every leaf of a nested dict, keeping the fields' order."""
    return {k: _map(fn, v) if isinstance(v, Mapping) else fn(v) for k, v in tree.items()}


def _draw_seed(rngs: nnx.Rngs) -> int:
    """A permutation seed drawn from ``rngs`` (its ``shuffle`` stream, else ``default``)."""
    check_rngs(rngs, "MemorySource")
    stream = rngs.shuffle if "shuffle" in rngs else rngs.default
    return int(jax.random.bits(stream(), (), jnp.uint32))


class _ColumnStore:
    """The records of a MemorySource, kept out of NNX state.

    ``columns`` (device arrays in the gather layout of
    :class:`~datarax.sources.memory_columns.DeviceColumn`) reach the compiled step as
    arguments (:meth:`bind`), never constants; ``host`` holds the text fields. It
    compares equal to any holder of the same fields, shapes and dtypes, so equally
    shaped sources share one compiled step.
    """

    def __init__(self, device: dict[Path, DeviceColumn], host: dict[Path, np.ndarray],
                 order: list[Path]) -> None:
        self.columns = unflatten({p: c.rows for p, c in device.items()})
        self.record_shapes = {p: c.record_shape for p, c in device.items()}
        self.host = host
        self.order = order
        shapes = {p: ((len(c.rows), *c.record_shape), str(c.rows.dtype)) for p, c in device.items()}
        shapes.update({p: (tuple(v.shape), str(v.dtype)) for p, v in host.items()})
        self._signature = tuple((p, *shapes[p]) for p in sorted(shapes))
        self._bound = threading.local()

    def layout(self) -> _ColumnStore:
        """An equal store without the device records: each device column as a
        ``jax.ShapeDtypeStruct``. The text columns stay (shared, host memory): a step run
        op by op under ``jax.disable_jit()`` merges them at its concrete indices."""
        twin = copy.copy(self)
        twin.columns = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), self.columns)
        twin._bound = threading.local()
        return twin

    def pinned(self) -> _ColumnStore:
        """This store, equal only to itself and its other pinned copies (it holds this
        store, so the id in its signature is not reused while it lives)."""
        twin = copy.copy(self)
        twin._signature = (*self._signature, ("records", id(self)))
        twin._pinned_to = self
        twin._bound = threading.local()
        return twin

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """The records never change, so a copy of the source shares them."""
        return self

    def __getstate__(self) -> dict[str, Any]:
        """Pickled: the records, without this thread's binding (``_bound``)."""
        return {k: v for k, v in vars(self).items() if k != "_bound"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._bound = threading.local()

    def current(self) -> dict[str, Any]:
        """The device columns in their gather layout (inside the compiled step: its
        arguments)."""
        bound = getattr(self._bound, "inputs", None)
        return self.columns if bound is None else bound

    def shaped(self, rows: dict[str, Any], *, single: bool = False) -> dict[str, Any]:
        """``rows`` (gathered from :meth:`current`, records along axis 0, or one record
        when ``single``) in the records' own shapes."""
        flat = flatten(rows)
        return unflatten({
            p: _reshape(v, self.record_shapes[p] if single else (v.shape[0], *self.record_shapes[p]))
            for p, v in flat.items()
        })

    def shaped_specs(self) -> dict[str, Any]:
        """A ``jax.ShapeDtypeStruct`` of each device field in the records' shape."""
        return unflatten({
            p: jax.ShapeDtypeStruct((v.shape[0], *self.record_shapes[p]), v.dtype)
            for p, v in flatten(self.columns).items()
        })

    @contextlib.contextmanager
    def bind(self, inputs: Any, order: Any = None) -> Iterator[None]:
        previous = (getattr(self._bound, "inputs", None), getattr(self._bound, "order", None))
        self._bound.inputs, self._bound.order = inputs, order
        try:
            yield
        finally:
            self._bound.inputs, self._bound.order = previous

    def bound_order(self) -> Any:
        """The epoch order bound with the columns (``{"base", "order"}``), or None."""
        return getattr(self._bound, "order", None)

    def merge(self, device: Batch, indices: Any, *, single: bool = False) -> Batch:
        """``device`` fields plus the text fields at ``indices`` (a batch's as lists, one
        record's as the value), in the data's field order."""
        flat = flatten(device)
        for path, column in self.host.items():
            flat[path] = column[indices] if single else list(column[np.asarray(indices)])
        return unflatten({p: flat[p] for p in self.order if p in flat})

    def merge_specs(self, device: dict[str, Any]) -> dict[str, Any]:
        flat = flatten(device)
        for path, column in self.host.items():
            kind = text_kind(column.reshape(-1)[:1]) or None  # one kind: checked when built
            flat[path] = TextSpec(tuple(column.shape[1:]), kind)
        return unflatten({p: flat[p] for p in self.order})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ColumnStore) and other._signature == self._signature

    def __hash__(self) -> int:
        return hash(self._signature)
