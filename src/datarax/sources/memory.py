"""``MemorySource``: records already in memory, served on the compiled path."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_bool, check_int, check_seed
from datarax.core.data_source import Batch
from datarax.core.element import Element
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.indexed import IndexedSource
from datarax.core.spec import array_to_spec_strip_leading, x64_enabled
from datarax.samplers.index_shuffle import epoch_permutation_jnp, index_shuffle_np


@dataclass(frozen=True)
class MemorySourceConfig(StructuralConfig):
    """Configuration of :class:`MemorySource`.

    Attributes:
        shuffle: serve records in a Feistel permutation, new each epoch (``seed + epoch``).
        seed: the permutation seed (an int in ``[0, 2**32)``).
        track_metadata: iterating the source yields :class:`~datarax.core.element.Element`
            objects carrying ``RecordMetadata`` (stable index, epoch, source name).
        num_epochs: passes that direct iteration (``for e in source``) makes; ``-1`` is
            unbounded. A Pipeline always runs one pass per ``iter(pipeline)``.
    """

    shuffle: bool = False
    seed: int = 42
    track_metadata: bool = False
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "shuffle")
        check_seed(self, "seed")
        check_bool(self, "track_metadata")
        check_int(self, "num_epochs", minimum=1, allowed=(-1,))


class MemorySource(IndexedSource):
    """Records held in device memory; an indexed source (compiled pipeline path).

    ``data`` is a dict of equal-length arrays (records along axis 0) or a sequence of
    records, each a dict of scalars/arrays. Python numbers become JAX's default
    int32/float32; a 64-bit NumPy array is refused while ``jax_enable_x64`` is off.

    The records are not NNX state: ``nnx.state(source)`` holds the position and the
    shuffle seed, not the dataset (the compiled step receives the arrays as arguments).

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), [{"x": i} for i in range(5)])
        >>> len(src), src.get_batch_at(3, 2)["x"].tolist()
        (5, [3, 4])
    """

    config: MemorySourceConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: MemorySourceConfig,
        data: Mapping[str, Any] | Sequence[Any],
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(config, rngs=rngs, name=name)
        columns = _to_columns(data)
        self.__store = _ColumnStore(columns)
        self.__length = int(next(iter(columns.values())).shape[0])
        # The seed travels as data, not as a constant baked into the compiled step, so one
        # executable (and one persistent-cache entry) serves every seed.
        self.permutation_seed = nnx.Variable(np.asarray(config.seed, np.uint32))

    def __len__(self) -> int:
        return self.__length

    @property
    def data(self) -> dict[str, Any]:
        """The fields, records along axis 0 (inside the compiled step: its arguments)."""
        return self.__store.current()

    def step_inputs(self) -> dict[str, Any]:
        return self.__store.columns

    def bind_step_inputs(self, inputs: Any) -> contextlib.AbstractContextManager[None]:
        return self.__store.bind(inputs)

    def _positions_to_indices(self, positions: Any) -> Any:
        """Map global positions to record indices (shuffled per epoch when enabled)."""
        if not self.config.shuffle:
            return positions % self.__length
        return epoch_permutation_jnp(positions, self.__length, self.permutation_seed.get_value())

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index (position in ``data``) of each record ``get_batch_at`` serves."""
        return self._positions_to_indices(jnp.arange(size, dtype=jnp.int32) + start)

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        """``size`` records from global position ``start`` (wrapping into the next epoch)."""
        return self.get_batch_and_indices_at(start, size, key)[0]

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """The batch and its stable indices, the shuffle computed once."""
        if type(self).get_batch_at is not MemorySource.get_batch_at:  # a subclass reads
            return super().get_batch_and_indices_at(start, size, key)
        indices = self.record_indices_at(start, size, key)
        return {k: jnp.take(v, indices, axis=0) for k, v in self.data.items()}, indices

    def element_spec(self) -> dict[str, Any]:
        return {k: array_to_spec_strip_leading(v) for k, v in self.data.items()}

    def _read_record(self, epoch: int, index: int) -> tuple[Batch, int]:
        n = self.__length
        if self.config.shuffle:
            stable = int(index_shuffle_np(np.asarray([index]), n - 1, (self.config.seed + epoch) % 2**32)[0])
        else:
            stable = index
        return {k: v[stable] for k, v in self.data.items()}, stable


class _ColumnStore:
    """The records of a MemorySource, kept out of NNX state.

    NNX sees this holder as static structure; it compares equal to any holder of the
    same fields, shapes and dtypes, so equally shaped sources share one compiled step.
    The step receives the arrays as arguments (:meth:`bind`), never as constants.
    """

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns
        self._signature = tuple(
            (k, tuple(v.shape), str(v.dtype)) for k, v in sorted(columns.items())
        )
        self._bound = threading.local()

    def current(self) -> dict[str, Any]:
        bound = getattr(self._bound, "inputs", None)
        return self.columns if bound is None else bound

    @contextlib.contextmanager
    def bind(self, inputs: Any) -> Iterator[None]:
        previous = getattr(self._bound, "inputs", None)
        self._bound.inputs = inputs
        try:
            yield
        finally:
            self._bound.inputs = previous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ColumnStore) and other._signature == self._signature

    def __hash__(self) -> int:
        return hash(self._signature)


def _to_columns(data: Any) -> dict[str, jax.Array]:
    """Turn a dict of arrays or a sequence of records into a dict of device arrays."""
    if isinstance(data, Mapping):
        if not data:
            raise DataraxError("MemorySource got an empty dict; pass at least one field.")
        columns = {str(k): _column(k, v) for k, v in data.items()}
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        if len(data) == 0:
            raise DataraxError("MemorySource got an empty sequence; pass at least one record.")
        records = [r.data if isinstance(r, Element) else r for r in data]
        first = records[0]
        if not isinstance(first, Mapping):
            raise DataraxError(
                f"MemorySource records must be dicts of fields, record 0 is "
                f"{type(first).__name__}. Wrap it, e.g. [{{'x': r}} for r in data], or pass "
                "a dict of arrays."
            )
        keys = list(first.keys())
        for i, record in enumerate(records):
            if not isinstance(record, Mapping) or list(record.keys()) != keys:
                got = list(record.keys()) if isinstance(record, Mapping) else type(record).__name__
                raise DataraxError(
                    f"MemorySource record {i} has fields {got}, record 0 has {keys}; every "
                    "record needs the same fields."
                )
        columns = {}
        for key in keys:
            values = [record[key] for record in records]
            shapes = {np.shape(v) for v in values}
            if len(shapes) > 1:
                bad = next(i for i, v in enumerate(values) if np.shape(v) != np.shape(values[0]))
                raise DataraxError(
                    f"MemorySource field '{key}': record {bad} has shape {np.shape(values[bad])}, "
                    f"record 0 has {np.shape(values[0])}; pad or resize records to one shape."
                )
            if all(isinstance(v, (jax.Array, np.ndarray, np.generic)) for v in values):
                columns[str(key)] = _column(key, np.stack([np.asarray(v) for v in values]))
            else:
                columns[str(key)] = _column(key, values)
    else:
        raise DataraxError(
            f"MemorySource data must be a dict of arrays or a sequence of records, got "
            f"{type(data).__name__}."
        )
    lengths = {k: int(v.shape[0]) for k, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise DataraxError(
            f"MemorySource fields have different numbers of records: {lengths}; every field "
            "needs one entry per record."
        )
    if next(iter(lengths.values())) == 0:
        raise DataraxError("MemorySource data holds no records.")
    return columns


def _column(name: Any, value: Any) -> jax.Array:
    """One field as a device array; 64-bit NumPy input is refused without x64."""
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        dtype = np.dtype(value.dtype)
        if dtype.kind in "USO":
            raise DataraxError(
                f"MemorySource field '{name}' holds {dtype} values; MemorySource keeps "
                "numeric arrays on the device. Encode text (e.g. token ids) first."
            )
        if dtype.itemsize == 8 and dtype.kind in "iufc" and not x64_enabled():
            raise ConfigError(
                f"MemorySource field '{name}' is {dtype.name} but jax_enable_x64 is off, so "
                f"it would be silently narrowed to 32 bits. Cast it first (e.g. "
                f"x.astype(np.{'float32' if dtype.kind in 'fc' else 'int32'})) or enable "
                "x64 with jax.config.update('jax_enable_x64', True)."
            )
        # device_put, not jnp.asarray: the latter compiles a conversion per new shape.
        array = jax.device_put(value)
    else:
        try:
            array = jnp.asarray(value)
        except (TypeError, ValueError) as err:
            raise DataraxError(
                f"MemorySource field '{name}' cannot be turned into an array: {err}"
            ) from err
    if array.ndim == 0:
        raise DataraxError(
            f"MemorySource field '{name}' is a scalar; a dict of arrays needs one entry "
            "per record along axis 0."
        )
    return array
