"""``ElementOperator``: a per-record function applied to whole batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from datarax.core.batch import batch_length, record_at, stack_records
from datarax.core.config import StructuralConfig
from datarax.core.element import Element
from datarax.core.errors import DataraxError
from datarax.core.dtypes import fit_value, is_host_leaf, text_as_list
from datarax.operators._records import (
    TRACER_ERRORS,
    FunctionOperator,
    check_draw_settings,
    check_fields_out,
    check_keys,
    traced_fn_error,
)
from datarax.typing import Batch


_RETURN_32_BITS = "return 32-bit values from fn (np.int32, np.float32)."


@dataclass(frozen=True)
class ElementOperatorConfig(StructuralConfig):
    """Configuration of :class:`ElementOperator`.

    Attributes:
        stochastic: ``fn`` draws from its ``key`` argument (one per record, from the
            stage's base key, the epoch and the record's stable index); else ``key=None``.
        stream_name: the ``nnx.Rngs`` stream of the base key when ``rngs`` is given.
    """

    stochastic: bool = False
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_draw_settings(self)


class ElementOperator(FunctionOperator):
    """Apply ``fn(element, key)`` to every record of a batch.

    ``fn`` gets an :class:`~datarax.core.element.Element` (the record's fields, no metadata)
    and a PRNG key (``None`` when not stochastic). It returns an Element (the whole record:
    ``replace_data`` drops fields) or a dict updating the fields it names. Numeric batches
    run under ``jax.vmap``; batches with text fields run record by record on the host.

    Example:
        >>> import jax.numpy as jnp
        >>> def double(element, key=None):
        ...     return {"x": element.data["x"] * 2}
        >>> op = ElementOperator(fn=double)  # = ElementOperator(ElementOperatorConfig(), fn=double)
        >>> out = op.apply_batch({"x": jnp.arange(3), "label": jnp.array([7, 8, 9])}, None)
        >>> out["x"].tolist(), out["label"].tolist()
        ([0, 2, 4], [7, 8, 9])
    """

    per_record = True  # fn sees one record at a time
    config_class = ElementOperatorConfig

    config: ElementOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def fn_arguments(self) -> tuple[str, ...]:
        """``fn(element, key)``."""
        return ("element", "key")

    def _call(self, data: Batch, key: Any, traced: bool = False) -> Batch:
        try:
            out = self.fn(Element(data), key)
        except KeyError as err:
            missing = err.args[0] if len(err.args) == 1 else None
            nested = any(isinstance(v, dict) for v in data.values())
            if not isinstance(missing, str) or missing in data or nested:
                raise  # a key of a nested field, or not a field at all
            err.add_note(
                f"ElementOperator '{self.name}': fn read field '{missing}', which the records "
                f"do not have; they have fields {sorted(data)}. Read one of those (an earlier "
                "stage may have renamed or dropped it)."
            )
            raise
        if isinstance(out, Element):
            out = dict(out.data)
            check_fields_out(self, out, traced)
            return out
        if isinstance(out, dict):
            check_fields_out(self, out, traced)
            return {**data, **out}
        hint = " (a function without a return statement gives None)" if out is None else ""
        raise DataraxError(
            f"ElementOperator '{self.name}': fn must return an Element (e.g. "
            f"element.update_data(...)) or a dict of the fields it changes, got "
            f"{type(out).__name__}{hint}."
        )

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Apply ``fn`` to each record (``keys``: one key per record or None)."""
        check_keys(self, keys, batch_length(data), required=self.stochastic)
        if any(is_host_leaf(v) for v in jax.tree.leaves(data, is_leaf=is_host_leaf)):
            return self._apply_per_record(data, keys)
        try:
            if keys is None:
                return jax.vmap(lambda d: self._call(d, None, traced=True))(data)
            return jax.vmap(lambda d, k: self._call(d, k, traced=True))(data, keys)
        except TRACER_ERRORS as err:
            raise traced_fn_error(self, err) from err

    def _apply_per_record(self, data: Batch, keys: Any | None) -> Batch:
        """Text batches run record by record on the host, stacked again after."""
        n = batch_length(data)
        if n == 0:
            return data
        outputs = [
            self._call(record_at(data, i), None if keys is None else keys[i]) for i in range(n)
        ]
        where = f"ElementOperator '{self.name}'"

        def to_batch(path: Any, value: Any) -> Any:
            if is_host_leaf(value):
                return text_as_list(value)
            # 64-bit values as a traced fn's would be (float64 to float32), but never
            # wrapped (int64 past int32) or made inf: jnp.asarray would do so silently
            name = "/".join(str(getattr(k, "key", k)) for k in path)
            return jnp.asarray(fit_value(name, value, cast_float64=True, where=where,
                                         drop_hint=_RETURN_32_BITS))

        return jax.tree_util.tree_map_with_path(to_batch, stack_records(outputs),
                                                is_leaf=is_host_leaf)
