"""Batch placement: where a Pipeline's batches live on the devices, and how they get there.

The spec's first entry splits the batch axis, further entries a field's next dimensions
(cut to its rank); other mesh axes replicate. With several processes the global batch is
their batches in process order. Text fields stay on the host.

Example:
    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh, PartitionSpec
    >>> mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    >>> placement = BatchPlacement.of((mesh, PartitionSpec("data")))
    >>> batch = placement.place({"x": np.arange(4, dtype=np.int32), "t": ["a"] * 4})
    >>> tuple(batch["x"].sharding.spec), batch["t"][0]
    (('data',), 'a')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from datarax.core.errors import ConfigError
from datarax.host.counts import count_words
from datarax.core.owned import owned_device_put, unshared
from datarax.core.dtypes import fit_column, is_64bit, is_host_leaf, x64_enabled
from datarax.typing import Batch


def _fitted(name: str, value: Any, where: str) -> Any:
    """``value`` as the devices will hold it while x64 is off (JAX would narrow silently)."""
    if isinstance(value, jax.Array) or x64_enabled():
        return value
    dtype = np.asarray(value).dtype
    if dtype.kind == "f" and is_64bit(dtype):
        raise ConfigError(
            f"{where}: field '{name}' is {dtype.name} but jax_enable_x64 is off, and datarax "
            "never narrows silently. Cast it yourself (value.astype(np.float32)), or enable "
            "x64 with jax.config.update('jax_enable_x64', True)."
        )
    return fit_column(name, value, where=where, cast_float64=False,
                      drop_hint="leave the field out of the batch (records count its rows)")


def _kind(value: Any) -> str:
    """``value``'s type name (``PartitionSpec``, which names itself ``P``, by its full name)."""
    return "PartitionSpec" if isinstance(value, PartitionSpec) else type(value).__name__


def _sharding_hint(sharding: Any) -> str:
    """What to pass instead of ``sharding``, a value ``BatchPlacement.of`` does not take."""
    if isinstance(sharding, Mesh):
        return "Name the mesh axis the batch is split over: (mesh, PartitionSpec('data'))."
    if isinstance(sharding, PartitionSpec):
        return "Give its mesh with it: (mesh, spec) or NamedSharding(mesh, spec)."
    if isinstance(sharding, jax.sharding.Sharding):
        return ("To put every batch on one device, leave sharding= out and iterate under "
                "`with jax.default_device(device):`; to split batches over devices, build a "
                "Mesh of them and pass NamedSharding(mesh, PartitionSpec('data')).")
    return "For example NamedSharding(Mesh(np.asarray(jax.devices()), ('data',)), PartitionSpec('data'))."


def _axes(entry: Any) -> tuple[str, ...]:
    """Mesh axis names one partition-spec entry splits over."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


@dataclass(frozen=True)
class BatchPlacement:
    """One ``NamedSharding`` for every batch field (see the module docstring)."""

    sharding: NamedSharding

    @classmethod
    def of(cls, sharding: Any) -> BatchPlacement:
        """From a ``NamedSharding`` or a ``(Mesh, PartitionSpec)`` pair."""
        if isinstance(sharding, tuple) and len(sharding) == 2:
            mesh, spec = sharding
            if not isinstance(mesh, Mesh) or not isinstance(spec, PartitionSpec):
                kinds = ", ".join(_kind(v) for v in sharding)
                raise ConfigError(
                    "Pipeline sharding=(mesh, spec) needs a jax.sharding.Mesh and a "
                    f"PartitionSpec, got ({kinds})."
                )
        elif isinstance(sharding, NamedSharding):
            mesh, spec = sharding.mesh, sharding.spec
        else:
            raise ConfigError(
                "Pipeline sharding must be a jax.sharding.NamedSharding or a (Mesh, "
                f"PartitionSpec) pair, got {_kind(sharding)}. {_sharding_hint(sharding)}"
            )
        entries = tuple(spec)
        if not entries or not _axes(entries[0]):
            whole = "" if any(_axes(e) for e in entries) else (
                " (For whole batches on every device, leave sharding= out and place each "
                "batch yourself: jax.device_put(batch, NamedSharding(mesh, PartitionSpec())).)")
            raise ConfigError(
                f"Pipeline sharding spec {tuple(entries)} does not split the batch axis: its "
                f"first entry must name a mesh axis, e.g. PartitionSpec('data').{whole}"
            )
        named: list[str] = []
        for entry in entries:
            missing = [a for a in _axes(entry) if a not in mesh.axis_names]
            if missing:
                raise ConfigError(
                    f"Pipeline sharding spec {tuple(entries)} names axis {missing[0]!r}; the "
                    f"mesh has axes {list(mesh.axis_names)}."
                )
            twice = [a for a in _axes(entry) if a in named or _axes(entry).count(a) > 1]
            if twice:
                raise ConfigError(
                    f"Pipeline sharding spec {tuple(entries)} names mesh axis {twice[0]!r} "
                    "twice; a mesh axis splits one dimension at most (the batch axis is the "
                    "first entry's): name it once, or None where a dimension is not split."
                )
            named += _axes(entry)
        return cls(NamedSharding(mesh, spec))

    @property
    def batch_axes(self) -> tuple[str, ...]:
        """The mesh axes the batch axis is split over."""
        return _axes(tuple(self.sharding.spec)[0])

    @property
    def local_split(self) -> int:
        """Distinct positions this process's devices hold along the batch axes."""
        mesh = self.sharding.mesh
        where = [list(mesh.axis_names).index(a) for a in self.batch_axes]
        here = jax.process_index()
        rows = {
            tuple(index[p] for p in where)
            for index, device in np.ndenumerate(mesh.devices)
            if device.process_index == here
        }
        return max(len(rows), 1)

    def check_records(self, records: int, where: str) -> None:
        """Refuse a local batch of ``records`` that does not split over this process's devices."""
        split = self.local_split
        if records % split:
            raise ConfigError(
                f"{where}: {count_words(records, 'record')} "
                f"{'does' if records == 1 else 'do'} not split over this process's {split} "
                f"devices on mesh axes {list(self.batch_axes)}; every batch placed there "
                f"holds a multiple of {split} records. Use a batch size divisible by {split} "
                "and, for an epoch's short last batch, drop_remainder=True (or an epoch "
                "length whose last batch divides too)."
            )

    def check_dims(self, shape: tuple[int, ...], where: str) -> None:
        """Refuse a field whose later dimensions do not split over their mesh axes."""
        mesh = self.sharding.mesh
        for dim, entry in enumerate(tuple(self.sharding.spec)[1:len(shape)], start=1):
            axes = _axes(entry)
            split = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
            if shape[dim] % split:
                raise ConfigError(
                    f"{where}: dimension {dim} has size {shape[dim]} (shape {tuple(shape)}), "
                    f"which does not split over the {split} devices of mesh axes "
                    f"{list(axes)} that sharding spec {tuple(self.sharding.spec)} names for "
                    f"it; use a size divisible by {split}, or None at that spec entry."
                )

    def field_sharding(self, ndim: int) -> NamedSharding:
        """The sharding of a field of rank ``ndim`` (spec cut to the field's rank)."""
        spec = tuple(self.sharding.spec)[:ndim]
        return NamedSharding(self.sharding.mesh, PartitionSpec(*spec))

    @property
    def explicit(self) -> bool:
        """Whether the mesh has axes of ``AxisType.Explicit`` (sharding in the arrays' types)."""
        return AxisType.Explicit in tuple(self.sharding.mesh.axis_types)

    def constrain(self, value: jax.Array) -> jax.Array:
        """``value``, inside a traced program, held with its field's sharding: resharded
        over the mesh's ``Explicit`` axes (``with_sharding_constraint`` only asserts
        those), constrained over its ``Auto`` ones."""
        mesh = self.sharding.mesh
        kinds = dict(zip(mesh.axis_names, mesh.axis_types))
        spec = tuple(self.field_sharding(value.ndim).spec)
        for entry in spec:
            if len({kinds[a] == AxisType.Explicit for a in _axes(entry)}) > 1:
                raise ConfigError(
                    f"Pipeline.scan: sharding spec {tuple(self.sharding.spec)} splits one "
                    f"dimension over mesh axes {list(_axes(entry))} of different types "
                    f"({', '.join(str(kinds[a]) for a in _axes(entry))}); JAX splits a "
                    "dimension over axes of one type. Give those axes one type, or iterate "
                    "the pipeline (step()) instead of scan."
                )
        for explicit in (True, False):
            part = [entry if _axes(entry) and (kinds[_axes(entry)[0]] == AxisType.Explicit)
                    == explicit else None for entry in spec]
            if any(entry is not None for entry in part):
                target = NamedSharding(mesh, PartitionSpec(*part))
                value = (jax.sharding.reshard(value, target) if explicit
                         else jax.lax.with_sharding_constraint(value, target))
        return value

    def place(self, batch: Mapping[str, Any], where: str = "batch") -> Batch:
        """``batch`` (this process's rows) as global arrays with this sharding."""
        several = jax.process_count() > 1
        out: Batch = {}
        for name, value in batch.items():
            if is_host_leaf(value):
                out[name] = value
                continue
            if isinstance(value, Mapping):
                out[name] = self.place(value, f"{where}, field '{name}'")
                continue
            value = _fitted(name, value, where)
            ndim = np.ndim(value)
            if ndim == 0:
                raise ConfigError(f"{where}: field '{name}' is a scalar; it needs a batch axis.")
            self.check_records(int(np.shape(value)[0]), f"{where}, field '{name}'")
            self.check_dims(np.shape(value), f"{where}, field '{name}'")
            sharding = self.field_sharding(ndim)
            if several:
                out[name] = jax.make_array_from_process_local_data(sharding, unshared(value))
            else:
                out[name] = owned_device_put(value, sharding)
        return out
