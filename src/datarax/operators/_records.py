"""Helpers the operators share: the function-wrapping base, field checks, per-record
application, child keys.

A per-record choice applies a child to a batch of one; child keys are
``fold_in(record_key, position)``, so draws are the same at any batch size or resume point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.errors import ConfigError, DataraxError, first_line, refused_call
from datarax.core.indexed import TRACER_ERRORS
from datarax.core.config import StructuralConfig, check_bool
from datarax.core.operator import OperatorModule
from datarax.host.counts import count_words
from datarax.typing import Batch


class FunctionOperator(OperatorModule):
    """An operator around one user function ``fn`` (static; it names the stage by default)."""

    def __init__(
        self,
        config: StructuralConfig | None = None,
        *positional: Any,
        fn: Callable[..., Any] | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        if fn is None or positional:
            cls = type(self).__name__
            given = "" if config is None or isinstance(config, StructuralConfig) else (
                f" (the first argument, {type(config).__name__}, is the config)")
            if positional:
                given = (f" (got {len(positional) + 1} positional arguments; only the "
                         "config is positional)")
            raise ConfigError(
                f"{cls} needs fn=... as a keyword{given}: the function it applies, e.g. "
                f"{cls}(fn=my_function) or {cls}({cls}Config(), fn=my_function)."
            )
        if not callable(fn):
            raise ConfigError(
                f"{type(self).__name__} fn must be callable, got {type(fn).__name__}."
            )
        super().__init__(
            config, rngs=rngs, name=name or getattr(fn, "__name__", None), **settings
        )
        self._check_arguments(fn)
        self.fn = nnx.static(fn)

    def fn_arguments(self) -> tuple[str, ...]:
        """The positional arguments ``fn`` is called with (their names, for messages)."""
        raise NotImplementedError

    def _check_arguments(self, fn: Callable[..., Any]) -> None:
        arguments = self.fn_arguments()
        refused = refused_call(fn, *arguments)
        if refused is not None:
            signature, err = refused
            params = ", ".join(a + "=None" if a == "key" else a for a in arguments)
            fn_name = getattr(fn, "__name__", "fn")
            example = (f"lambda {params}: {arguments[0]}" if fn_name == "<lambda>"
                       else f"def {fn_name}({params})")
            hint = (" (a fn that draws from a key needs stochastic=True; one that ignores "
                    f"it can default it, lambda {arguments[0]}, key=None: ...)"
                    if "key" not in arguments and len(signature.parameters) > len(arguments)
                    else "")
            raise ConfigError(
                f"{type(self).__name__} '{self.name}' calls fn({', '.join(arguments)}), but "
                f"fn{signature} cannot take that ({err}). Give fn {len(arguments)} "
                f"positional parameter(s), e.g. {example}{hint}."
            )


TRACED_HINT = (
    "fn runs compiled, traced under jax.vmap (its values are abstract arrays, not numbers): "
    "write it with jax.numpy: jnp.where(...) or jax.lax.cond(...) instead of if, & | ~ "
    "instead of and / or / not, x.astype(jnp.float32) instead of float(x) or int(x), "
    "jnp.asarray(table)[x] to index a NumPy array with a field; print values with "
    "jax.debug.print(\"{}\", x)."
)


def traced_fn_error(op: OperatorModule, err: BaseException) -> ConfigError:
    """The error for a user ``fn`` that needed a concrete value of a traced array."""
    first = first_line(err)
    return ConfigError(
        f"{type(op).__name__} '{op.name}': fn needs a concrete value of a traced array "
        f"({type(err).__name__}: {first}). {TRACED_HINT}"
    )


def check_fields_out(op: OperatorModule, out: dict[str, Any], traced: bool) -> None:
    """Refuse fields ``fn`` returned as ``None`` (or, when traced, as a non-array)."""
    none = sorted(str(path[0].key) if len(path) == 1 else jax.tree_util.keystr(path)
                  for path, v in jax.tree_util.tree_leaves_with_path(
                      out, is_leaf=lambda v: v is None) if v is None)
    if none:
        drop = ("return element.replace_data({...}) with the fields to keep"
                if type(op).__name__ == "ElementOperator"
                else "use ElementOperator(fn=lambda el, key=None: el.replace_data({...}))")
        raise DataraxError(
            f"{type(op).__name__} '{op.name}': fn returned None for field(s) {none}; every "
            f"field must be an array or a number. To drop a field, {drop}."
        )
    if not traced:
        return
    for path, leaf in jax.tree_util.tree_leaves_with_path(out):
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
            raise DataraxError(
                f"{type(op).__name__} '{op.name}': fn returned field "
                f"{jax.tree_util.keystr(path)} as {type(leaf).__name__} {leaf!r:.60}; in the "
                "compiled step every field must be an array or a number. Return "
                "jnp.asarray(...) of it, or make the value a field of the source."
            )


def check_draw_settings(config: Any) -> None:
    """Refuse a config's non-bool ``stochastic`` and bad ``stream_name``."""
    check_bool(config, "stochastic")
    check_stream_name(config.stream_name, f"{type(config).__name__}.stream_name")


def check_stream_name(name: Any, where: str) -> None:
    """Refuse a ``stream_name`` unless it is None or an identifier string."""
    if name is not None and not (isinstance(name, str) and name.isidentifier()):
        raise ConfigError(
            f"{where} must be None or an identifier string (the nnx.Rngs stream to draw "
            f"from, e.g. 'augment'), got {name!r}."
        )


def check_keys(op: OperatorModule, keys: Any, records: int, *, required: bool = False) -> None:
    """Refuse ``keys`` that are not one PRNG key per record (or None, unless ``required``)."""
    if keys is None:
        if required:
            raise DataraxError(
                f"{type(op).__name__} '{op.name}' is stochastic but got no keys; run it in a "
                "Pipeline or pass one key per record."
            )
        return
    shape = tuple(np.shape(keys))
    typed = jax.dtypes.issubdtype(getattr(keys, "dtype", None), jax.dtypes.prng_key)
    if shape[:1] != (records,) or len(shape) != (1 if typed else 2):
        raise DataraxError(
            f"{type(op).__name__} '{op.name}': got keys of shape {shape} for a batch of "
            f"{count_words(records, 'record')}; it needs one key per record, e.g. "
            f"datarax.core.keys.record_keys(key, epoch, jnp.arange({records})) (what a "
            f"Pipeline passes) or jax.random.split(key, {records})."
        )


def require_fields(data: Batch, fields: Iterable[str], owner: str) -> None:
    """Raise :class:`DataraxError` naming the fields ``data`` lacks and those it has."""
    missing = [f for f in fields if f not in data]
    if missing:
        raise DataraxError(
            f"{owner}: field(s) {missing} not in the batch; the batch has fields "
            f"{sorted(data)}. Point the operator at one of those."
        )


def check_operators(operators: Any, owner: str) -> list[OperatorModule]:
    """The operators as a list; refuses an empty list or anything not an OperatorModule."""
    if isinstance(operators, OperatorModule) or not isinstance(operators, Sequence):
        raise ConfigError(
            f"{owner}: operators must be a list of operator modules, got "
            f"{type(operators).__name__}."
        )
    ops = list(operators)
    if not ops:
        raise ConfigError(f"{owner}: operators is empty; give at least one operator.")
    for i, op in enumerate(ops):
        if not isinstance(op, OperatorModule):
            raise ConfigError(
                f"{owner}: operator {i} is {type(op).__name__}, not an operator module "
                "(wrap a function in ElementOperator or MapOperator)."
            )
    return ops


def check_per_record_choices(ops: Sequence[OperatorModule], owner: str) -> None:
    """Refuse batch-level operators (``per_record`` False) in a choice made per record."""
    for i, op in enumerate(ops):
        if not op.per_record:
            raise ConfigError(
                f"{owner}: operator {i} ({op.name}) works on the whole batch (its per_record "
                "is False: e.g. BatchMixOperator pairs records of the batch), but the choice "
                "here is made record by record, so it would see batches of one record (a "
                "mixup would mix each record with itself). Give it a stage of its own (or a "
                "'sequential' composite); an operator of your own that maps each record "
                "independently sets per_record = True on its class."
            )


def float_weights(weights: Any, what: str, hint: str = "") -> tuple[float, ...]:
    """``weights`` as a tuple of floats; else ConfigError naming ``what``."""
    try:
        return tuple(float(w) for w in weights)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} must be a list of numbers{hint}, got {weights!r}.") from err


def check_weights(weights: Any, count: int, owner: str) -> tuple[float, ...]:
    """``weights`` as floats: one per operator, none negative, summing to more than 0."""
    values = float_weights(weights, f"{owner}: weights")
    if len(values) != count:
        raise ConfigError(
            f"{owner}: got {count_words(len(values), 'weight')} for "
            f"{count_words(count, 'operator')}; give one weight "
            "per operator."
        )
    if any(not 0 <= w < float("inf") for w in values):
        raise ConfigError(f"{owner}: weights must be finite numbers >= 0, got {list(values)}.")
    if sum(values) <= 0:
        raise ConfigError(f"{owner}: weights sum to 0; at least one must be positive.")
    return values


def default_name(owner: str, operators: Sequence[OperatorModule]) -> str:
    """``Owner[child, ...]``: the stage fingerprint changes when the children do."""
    return f"{owner}[{', '.join(op.name for op in operators)}]"


def child_key(key: Any, position: int) -> Any:
    """The key of child ``position`` for one record (``None`` stays ``None``)."""
    return None if key is None else jax.random.fold_in(key, position)


def apply_to_record(op: OperatorModule, record: Batch, key: Any) -> Batch:
    """``op`` applied to one record (as a batch of one); traceable inside ``vmap``."""
    batch = {name: value[None] for name, value in record.items()}
    keys = key[None] if (key is not None and op.stochastic) else None
    out = op.apply_batch(batch, keys)
    return {name: value[0] for name, value in out.items()}


def describe(tree: Any) -> dict[str, str]:
    """``{field: 'dtype(shape)'}`` of an abstract record, for error messages."""
    return {k: f"{v.dtype}{tuple(v.shape)}" for k, v in sorted(tree.items())}


def check_same_outputs(
    branches: Sequence[Callable[[Batch, Any], Batch]],
    names: Sequence[str],
    record: Batch,
    key: Any,
    owner: str,
) -> None:
    """Refuse branches whose outputs differ in fields, shapes or dtypes (cond/switch need one)."""
    shapes = [jax.eval_shape(branch, record, key) for branch in branches]
    first = describe(shapes[0])
    for name, shape in zip(names[1:], shapes[1:]):
        if describe(shape) != first:
            raise DataraxError(
                f"{owner}: every choice must give the same fields, shapes and dtypes so one "
                f"can be picked per record inside the compiled step; {names[0]} gives "
                f"{first} but {name} gives {describe(shape)}. Make them agree (e.g. cast "
                "dtypes, resize to one size)."
            )


def apply_where(pred: Any, op: OperatorModule, record: Batch, key: Any, label: str,
                owner: str) -> Batch:
    """``op`` applied to one record (with ``key``) where ``pred`` holds, else the record."""

    def apply(r: Batch, k: Any) -> Batch:
        return apply_to_record(op, r, k)

    def keep(r: Batch, k: Any) -> Batch:
        return r

    check_same_outputs([apply, keep], [label, "the unchanged record"], record, key, owner)
    return jax.lax.cond(pred, apply, keep, record, key)


def switch_branches(ops: Sequence[OperatorModule], record: Batch, key: Any, owner: str,
                    offset: int = 0) -> list[Callable[[Batch, Any], Batch]]:
    """One ``lax.switch`` branch per operator (child key ``i + offset``), checked alike."""
    branches = [
        (lambda r, k, op=op, i=i: apply_to_record(op, r, child_key(k, i + offset)))
        for i, op in enumerate(ops)
    ]
    check_same_outputs(branches, [f"operator {i} ({op.name})" for i, op in enumerate(ops)],
                       record, key, owner)
    return branches
