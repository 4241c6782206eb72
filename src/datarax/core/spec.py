"""Element specs: what each record of a source carries, and checks against it.

A spec maps field name to a per-record :class:`jax.ShapeDtypeStruct` (shape without the
batch axis), a :class:`TextSpec` for host-side strings, or a nested dict; checks name
nested fields by path (``"meta/id"``).

Example:
    >>> import numpy as np
    >>> spec = {"x": array_to_spec_strip_leading(np.zeros((8, 3), np.float32))}
    >>> spec["x"].shape, spec["x"].dtype
    ((3,), dtype('float32'))
    >>> validate_batch({"x": np.zeros((4, 3), np.float32)}, spec)
    >>> sorted(flatten_fields({"x": 1, "meta": {"id": 2}}))
    ['meta/id', 'x']
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from datarax.core.dtypes import declared_64bit, is_text_dtype, is_text_value, x64_enabled  # noqa: F401
from datarax.core.errors import SourceContractError, SpecMismatchError
from datarax.host.counts import count_words
from datarax.host.specs import ArraySpec, TextSpec, describe_field, host_field_spec


FieldSpec = jax.ShapeDtypeStruct | TextSpec


def field_spec(value: Any, *, batched: bool = False) -> FieldSpec:
    """The per-record spec of one field's value: :class:`TextSpec` for text, else a
    ``jax.ShapeDtypeStruct``; ``batched``: records along axis 0 (dropped from the shape).

    >>> field_spec("a film"), field_spec(np.zeros((4, 3), np.float32), batched=True).shape
    (TextSpec(shape=()), (3,))
    """
    return as_field_spec(host_field_spec(value, batched=batched))


def as_field_spec(spec: ArraySpec | TextSpec) -> FieldSpec:
    """A host spec with an :class:`ArraySpec` as a ``jax.ShapeDtypeStruct``."""
    if isinstance(spec, ArraySpec):
        return jax.ShapeDtypeStruct(spec.shape, spec.dtype)
    return spec


def has_text(spec: Any) -> bool:
    """Whether a (nested) spec declares a text field.

    >>> has_text({"x": jax.ShapeDtypeStruct((), np.int32)}), has_text({"m": {"w": TextSpec()}})
    (False, True)
    """
    leaves = jax.tree.leaves(spec, is_leaf=lambda s: isinstance(s, TextSpec))
    return any(isinstance(s, TextSpec) for s in leaves)


def text_fields(spec: Any) -> list[str]:
    """The paths of the text fields a (nested) spec declares, ``/``-joined.

    >>> text_fields({"x": jax.ShapeDtypeStruct((), np.int32), "m": {"w": TextSpec()}})
    ['m/w']
    """
    paths = jax.tree_util.tree_flatten_with_path(
        spec, is_leaf=lambda s: isinstance(s, TextSpec))[0]
    return ["/".join(str(getattr(k, "key", k)) for k in path)
            for path, s in paths if isinstance(s, TextSpec)]


def array_to_spec_strip_leading(array: Any) -> jax.ShapeDtypeStruct:
    """The per-record spec of a batched array: its shape without the leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> array_to_spec_strip_leading(jnp.zeros((100, 28, 28))).shape
        (28, 28)
    """
    shape = tuple(np.shape(array))
    if not shape:
        raise ValueError(
            "array_to_spec_strip_leading needs an array with a leading (record) axis, "
            "got a scalar."
        )
    return jax.ShapeDtypeStruct(shape[1:], np.dtype(getattr(array, "dtype", np.asarray(array).dtype)))


def flatten_fields(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The leaves of a (nested) dict of fields by path: ``{"meta/id": ..., "x": ...}``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_fields(value, f"{path}/"))
        else:
            flat[path] = value
    return flat


def check_same_fields(owner: str, labels: list[str], specs: list[Mapping[str, Any]],
                      joined: str, action: str) -> None:
    """Refuse children of ``owner`` whose (nested) fields differ, naming the field and the
    two ``labels``; ``joined`` ("mixed") and ``action`` ("mixing") word the message.

    >>> x = {"x": jax.ShapeDtypeStruct((), np.int32)}
    >>> check_same_fields("MixSource", ["source 'a'", "source 'b'"], [x, x], "mixed", "mixing")
    >>> check_same_fields("MixSource", ["source 'a'", "source 'b'"], [x, {}], "mixed", "mixing")
    Traceback (most recent call last):
    ...
    datarax.core.errors.SpecMismatchError: MixSource: field 'x' is in source 'a' but not in source 'b'; mixed sources must carry the same fields.
    """
    first = flatten_fields(specs[0])
    for label, spec in zip(labels[1:], specs[1:]):
        spec = flatten_fields(spec)
        for field in [*first, *(f for f in spec if f not in first)]:
            if field not in spec or field not in first:
                has, lacks = (labels[0], label) if field in first else (label, labels[0])
                raise SpecMismatchError(
                    f"{owner}: field '{field}' is in {has} but not in {lacks}; {joined} "
                    "sources must carry the same fields.",
                    fields=[field],
                )
            a, b = describe_field(first[field]), describe_field(spec[field])
            if a != b:
                raise SpecMismatchError(
                    f"{owner}: field '{field}' is {a} in {labels[0]} but {b} in {label}; "
                    f"cast or reshape one of them (e.g. with an operator) before {action}.",
                    fields=[field],
                )
            kinds = [getattr(s[field], "kind", None) for s in (first, spec)]
            if None not in kinds and kinds[0] != kinds[1]:  # str in one, bytes in the other
                raise SpecMismatchError(
                    f"{owner}: field '{field}' is text of {kinds[0]} in {labels[0]} but of "
                    f"{kinds[1]} in {label}; decode the bytes (value.decode('utf-8'), e.g. "
                    f"with an operator) before {action}.",
                    fields=[field],
                )


def check_spec_x64(spec: Mapping[str, Any], where: str = "source", *,
                   built_with_x64: bool = False) -> None:
    """Refuse declared 64-bit fields while ``jax_enable_x64`` is off, so nothing is narrowed;
    ``built_with_x64``: the source took its dtypes when built, with x64 on (the message says
    to build it again)."""
    flat = flatten_fields(spec)
    bad = declared_64bit(
        {name: s.dtype for name, s in flat.items() if isinstance(s, jax.ShapeDtypeStruct)}
    )
    if bad:
        details = ", ".join(f"'{n}' ({np.dtype(flat[n].dtype).name})" for n in bad)
        raise SpecMismatchError(
            f"{where} declares 64-bit field(s) {details} but jax_enable_x64 is off, so "
            "JAX would silently narrow them to 32 bits. "
            + (f"{where.split('.')[0]} took its dtypes when it was built, while x64 was on: "
               "build it again with x64 off (int64 columns that fit become int32; float64 "
               "needs cast_float64=True) or turn x64 back on with "
               "jax.config.update('jax_enable_x64', True)." if built_with_x64 else
               "Cast in the source (e.g. x.astype(np.float32) / np.int32) or enable x64 with "
               "jax.config.update('jax_enable_x64', True)."),
            fields=bad,
        )


_CHECKED: weakref.WeakKeyDictionary[Any, dict[bool, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def checked_spec(source: Any) -> dict[str, Any]:
    """``source.element_spec()``, read and checked once per source and x64 setting.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> source = MemorySource(MemorySourceConfig(), {"x": np.zeros((4, 2), np.float32)})
        >>> checked_spec(source)["x"].shape, checked_spec(source) is checked_spec(source)
        ((2,), True)
    """
    per_source = _CHECKED.setdefault(source, {})
    x64 = x64_enabled()
    if x64 not in per_source:
        spec = _declared(source)
        check_spec_x64(spec, where=f"{type(source).__name__}.element_spec()",
                       built_with_x64=getattr(source, "built_with_x64", False))
        _check_indexed_declaration(source, spec)
        per_source[x64] = spec
    return per_source[x64]


def _declared(source: Any) -> dict[str, Any]:
    """``source.element_spec()``, refused unless a (nested) dict of field specs."""
    spec = source.element_spec()
    where = f"{type(source).__name__}.element_spec()"
    form = ("a dict of fields, e.g. {'image': jax.ShapeDtypeStruct((28, 28), np.float32), "
            "'text': TextSpec()} (TextSpec from datarax.core.spec, for strings)")
    if not isinstance(spec, Mapping):
        raise SourceContractError(f"{where} returned {type(spec).__name__}, not {form}.")
    for name, leaf in flatten_fields(spec).items():
        if not isinstance(leaf, TextSpec) and not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise SourceContractError(
                f"{where} declares field '{name}' as {type(leaf).__name__} {leaf!r}; each "
                f"field is a jax.ShapeDtypeStruct (per record: shape without the batch "
                f"axis) or a TextSpec. Return {form}."
            )
    return dict(spec)


def _check_indexed_declaration(source: Any, spec: dict[str, Any]) -> None:
    """Refuse an indexed source whose ``element_spec()`` differs from what its traced
    ``get_batch_at`` emits (sizes 1 and 2), or whose batch is not ``size`` records long.
    Text specs, untraceable reads and ``spec_from_own_reads()`` sources are skipped."""
    kind = getattr(getattr(source, "kind", None), "value", None)
    if kind != "indexed" or not callable(getattr(source, "get_batch_at", None)):
        return
    if has_text(spec):
        return
    if source.spec_from_own_reads():
        return
    for size in (1, 2):  # two sizes: a get_batch_at that ignores size is seen to
        try:
            traced = jax.eval_shape(lambda n=size: source.get_batch_at(0, n, None))
        except Exception:  # noqa: BLE001 - the pass reports what is wrong with get_batch_at
            return
        where = f"{type(source).__name__}.get_batch_at(0, size={size}, key=None) (traced)"
        validate_batch(traced, spec, batch_size=size, where=where)
        held = {_leading(v) for v in flatten_fields(traced).values()} - {None}
        if held and held != {size}:
            raise SpecMismatchError(
                f"{where} returned {count_words(held.pop(), 'record')}; get_batch_at must return "
                "exactly "
                "size records, those at positions start .. start + size - 1 (a short batch "
                "would leave records out and repeat others). Index with "
                "(jnp.arange(size) + start) % len(self).",
                fields=sorted(flatten_fields(traced)),
            )


def refuse_declared_64bit(source: Any) -> None:
    """Raise :class:`~datarax.core.errors.SpecMismatchError` where ``source`` declares a
    64-bit field while ``jax_enable_x64`` is off (a spec that cannot be read is not checked).

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> refuse_declared_64bit(MemorySource(MemorySourceConfig(), {"x": np.arange(3)}))
    """
    try:
        checked_spec(source)
    except (SpecMismatchError, SourceContractError):
        raise
    except Exception:  # noqa: BLE001 - nothing declared to check
        return


def record_bytes(spec: Any) -> int:
    """Bytes of one record of a per-record ``spec`` (text fields count 0).

    Example:
        >>> record_bytes({"image": jax.ShapeDtypeStruct((4, 4, 3), np.uint8),
        ...               "label": jax.ShapeDtypeStruct((), np.int32)})
        52
    """
    return sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize
               for s in jax.tree.leaves(spec) if isinstance(s, jax.ShapeDtypeStruct))


def _leading(value: Any) -> int | None:
    if isinstance(value, (list, tuple)):
        return len(value)
    shape = np.shape(value)
    return shape[0] if shape else None


def _dtype_problem(dtype: np.dtype, declared: np.dtype) -> str:
    """Why a field's ``dtype`` is refused against ``declared``, naming a non-native byte order."""
    def words(d: np.dtype) -> str:
        return d.name if d.isnative else f"{d.name} in non-native byte order ('{d.str}')"

    if dtype == declared:  # both non-native: JAX holds neither
        return (f"has dtype {words(dtype)}, which JAX does not hold; declare and emit "
                f"{dtype.newbyteorder('=').name} in native byte order "
                "(x.astype(x.dtype.newbyteorder('=')))")
    problem = f"has dtype {words(dtype)}, declared {words(declared)}"
    if not dtype.isnative and dtype.newbyteorder("=") == declared:
        problem += "; emit native byte order (x.astype(x.dtype.newbyteorder('=')))"
    return problem


def validate_batch(
    batch: Mapping[str, Any],
    spec: Mapping[str, FieldSpec],
    *,
    batch_size: int | None = None,
    where: str = "batch",
) -> None:
    """Check a batch against a per-record spec; raise naming every field that disagrees.

    Checks missing and unexpected fields, one leading record axis (at most ``batch_size``
    when given), per-record shape and dtype.

    Raises:
        SpecMismatchError: with ``.fields`` listing each disagreeing field.
    """
    if not isinstance(batch, Mapping):
        raise SpecMismatchError(
            f"{where}: expected a dict of fields, got {type(batch).__name__}.", fields=[]
        )
    batch, spec = flatten_fields(batch), flatten_fields(spec)
    problems: list[str] = []
    fields: list[str] = []

    def bad(name: str, problem: str) -> None:
        problems.append(f"field '{name}' {problem}")
        fields.append(name)

    for name in spec:
        if name not in batch:
            bad(name, "is declared in element_spec() but missing")
    for name in batch:
        if name not in spec:
            bad(name, "is not declared in element_spec()")
    leading: dict[str, int | None] = {}
    for name, s in spec.items():
        if name not in batch:
            continue
        value = batch[name]
        n = leading[name] = _leading(value)
        if n is None:
            bad(name, "has no leading record axis (got a scalar)")
            continue
        if isinstance(s, TextSpec):
            if not is_text_value(value):
                bad(name, f"is declared text but holds "
                          f"{getattr(value, 'dtype', type(value).__name__)}")
            continue
        try:
            shape = tuple(np.shape(value))[1:]
            dtype = np.dtype(getattr(value, "dtype", np.asarray(value).dtype))
        except ValueError:  # a list of records of different shapes
            bad(name, "holds records of different shapes (a ragged list), so they do not "
                      "make one array: pad or truncate them to one shape")
            continue
        if is_text_value(value) or is_text_dtype(dtype):
            bad(name, f"is declared {np.dtype(s.dtype).name}{tuple(s.shape)} but holds "
                      f"strings (declare a text field as TextSpec({shape or ''}), "
                      "from datarax.core.spec)")
            continue
        if shape != tuple(s.shape):
            bad(name, f"has per-record shape {shape}, declared {tuple(s.shape)}")
        declared = np.dtype(s.dtype)
        if dtype != declared or not dtype.isnative:
            bad(name, _dtype_problem(dtype, declared))
    sizes = {n for n in leading.values() if n is not None}
    if len(sizes) > 1:
        detail = ", ".join(f"'{k}': {v}" for k, v in leading.items())
        problems.append(f"fields disagree on the number of records ({detail})")
        fields.extend(k for k in leading if k not in fields)
    elif sizes and batch_size is not None and max(sizes) > batch_size:
        problems.append(f"batch holds {max(sizes)} records, more than batch_size={batch_size}")
    if problems:
        raise SpecMismatchError(
            f"{where} does not match element_spec(): " + "; ".join(problems) + ". "
            "Make the source emit exactly what element_spec() declares (same keys, "
            "per-record shapes and dtypes).",
            fields=fields,
        )


def first_nonfinite(batch: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(field, row)`` of the first NaN/inf value in a floating field, or None.

    Example:
        >>> first_nonfinite({"x": np.array([[0.0], [np.nan]], np.float32)})
        ('x', 1)
        >>> first_nonfinite({"x": np.array([1.0, 2.0, np.inf], jax.numpy.bfloat16)})
        ('x', 2)
    """
    for name, value in flatten_fields(batch).items():
        if is_text_value(value):
            continue
        array = np.asarray(value)
        floating = array.dtype.kind in "fc" or jax.dtypes.issubdtype(array.dtype, np.inexact)
        if not floating or array.ndim == 0 or array.shape[0] == 0:  # (bfloat16: kind 'V')
            continue
        finite = np.isfinite(array.reshape(array.shape[0], -1)).all(axis=1)
        if not finite.all():
            return name, int(np.argmin(finite))
    return None


ArrayFields = tuple[tuple[str, tuple[int, ...], np.dtype], ...]


def array_fields(spec: Any) -> ArrayFields | None:
    """``(name, shape, dtype)`` of a flat array ``spec``, sorted by name (as JAX orders a
    dict); None where a field nests or is text (the full check then runs).

    >>> array_fields({"y": jax.ShapeDtypeStruct((), np.int32),
    ...               "x": jax.ShapeDtypeStruct((2,), np.float32)})
    (('x', (2,), dtype('float32')), ('y', (), dtype('int32')))
    >>> array_fields({"word": TextSpec()}) is None
    True
    """
    if not isinstance(spec, dict) or not spec:
        return None
    if not all(isinstance(s, jax.ShapeDtypeStruct) and np.dtype(s.dtype).isnative
               and np.dtype(s.dtype).kind not in "OUSMm" for s in spec.values()):
        return None
    return tuple(sorted((name, tuple(s.shape), np.dtype(s.dtype)) for name, s in spec.items()))


def plain_batch(batch: Any, fields: ArrayFields, batch_size: int) -> Any:
    """The fast form of :func:`validate_batch` (tests/pipeline/test_plain_batch.py keeps
    them agreeing): ``batch`` in ``fields``' order where it holds exactly those NumPy
    arrays, one row count <= ``batch_size``; else None (the full check then runs).

    >>> fields = (("x", (2,), np.dtype(np.float32)),)
    >>> plain_batch({"x": np.zeros((3, 2), np.float32)}, fields, 4)["x"].shape
    (3, 2)
    >>> plain_batch({"x": np.zeros((3, 2), np.float64)}, fields, 4) is None
    True
    """
    if type(batch) is not dict or len(batch) != len(fields):
        return None
    out = {}
    rows = -1
    for name, shape, dtype in fields:
        value = batch.get(name)
        if (type(value) is not np.ndarray or value.ndim != len(shape) + 1
                or value.shape[1:] != shape or value.dtype != dtype):
            return None
        if rows != value.shape[0]:
            if rows != -1:
                return None
            rows = value.shape[0]
        out[name] = value
    return out if rows <= batch_size else None


def checked_batch(batch: Any, spec: Any, fields: ArrayFields | None, batch_size: int, *,
                  where: str, bounded: bool = True) -> Any:
    """``batch`` checked against ``spec``: :func:`plain_batch`'s result, else None once
    :func:`validate_batch` passed it (``bounded``: also at most ``batch_size`` records).

    >>> spec = {"x": jax.ShapeDtypeStruct((2,), np.float32)}
    >>> checked_batch({"x": np.zeros((3, 2), np.float32)}, spec, array_fields(spec), 4,
    ...               where="batch")["x"].shape
    (3, 2)
    """
    plain = None if fields is None else plain_batch(batch, fields, batch_size)
    if plain is None:
        validate_batch(batch, spec, batch_size=batch_size if bounded else None, where=where)
    return plain
