"""``FilterOperator``: keep the records for which a predicate holds (docs/filtering.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, record_at, take_records
from datarax.core.config import StructuralConfig, check_bool
from datarax.core.element import Element
from datarax.core.errors import ConfigError, DataraxError, first_line, refused_call
from datarax.core.operator import RecordFilter
from datarax.core.dtypes import is_host_leaf
from datarax.operators._records import TRACER_ERRORS
from datarax.typing import Batch


@dataclass(frozen=True)
class FilterOperatorConfig(StructuralConfig):
    """Configuration of :class:`FilterOperator`.

    Attributes:
        on_host: run the predicate in Python on numpy records as they are read (host
            sources and streams only); else it runs compiled (``jax.vmap``).
    """

    on_host: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "on_host")


def _check_one_argument(predicate: Callable[..., Any], name: str) -> None:
    refused = refused_call(predicate, None)
    if refused is not None:
        signature, err = refused
        raise ConfigError(
            f"FilterOperator '{name}' calls predicate(element), but predicate{signature} "
            f"cannot take that ({err}). Give it one positional parameter, e.g. "
            "predicate=lambda element: element.data['label'] < 3 (a filter draws no key)."
        )


class FilterOperator(RecordFilter):
    """Keep the records for which ``predicate(element)`` is true.

    ``predicate`` gets one record as an :class:`~datarax.core.element.Element` and returns
    one boolean; in a Pipeline the later stages get full batches of kept records.

    Example:
        >>> import numpy as np
        >>> even = FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0)
        >>> out = even.apply_batch({"label": np.arange(6)}, None)
        >>> out["label"].tolist()
        [0, 2, 4]
    """

    per_record = True
    config_class = FilterOperatorConfig

    config: FilterOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: FilterOperatorConfig | None = None,
        *,
        predicate: Callable[[Element], Any] | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        if predicate is None:
            given = "" if config is None or isinstance(config, FilterOperatorConfig) else (
                f" (the first argument, {type(config).__name__}, is the config)"
            )
            raise ConfigError(
                f"FilterOperator needs the predicate as a keyword{given}: "
                "FilterOperator(predicate=fn), or FilterOperator(FilterOperatorConfig(), "
                "predicate=fn)."
            )
        if not callable(predicate):
            raise ConfigError(
                f"FilterOperator predicate must be callable, got {type(predicate).__name__}; "
                "pass a function of one element returning one boolean, e.g. "
                "predicate=lambda el: el.data['label'] < 3."
            )
        super().__init__(
            config, name=name or getattr(predicate, "__name__", None), **settings
        )
        _check_one_argument(predicate, self.name)
        self.predicate = nnx.static(predicate)

    @property
    def on_host(self) -> bool:
        """Whether the predicate runs in Python on numpy records (host sources only)."""
        return self.config.on_host

    def keep(self, data: Batch) -> Any:
        """One boolean per record of a numeric batch (traceable: ``jax.vmap``)."""
        return jax.vmap(lambda record: jnp.asarray(self._verdict(record)))(data)

    def _verdict(self, record: Batch) -> Any:
        value = self.predicate(Element(record))
        if value is None:
            raise ConfigError(
                f"FilterOperator '{self.name}': the predicate returned None; it must return "
                "one boolean per record, e.g. return element.data['label'] == 1 (a function "
                "without a return statement gives None)."
            )
        return value

    def keep_records(self, data: Batch, where: str) -> np.ndarray:
        """One boolean per record, ``predicate`` called in Python on each record."""
        out = np.zeros(batch_length(data), bool)
        for i in range(len(out)):
            try:
                value = self.predicate(Element(record_at(data, i)))
            except Exception as err:  # noqa: BLE001 - re-raised naming the record
                raise DataraxError(
                    f"FilterOperator '{self.name}' ({where}): the predicate raised "
                    f"{type(err).__name__} on record {i} (fields {sorted(data)}): {err}"
                ) from err
            shape = getattr(value, "shape", ())
            if not isinstance(value, (bool, np.bool_)) and not (
                shape == () and getattr(value, "dtype", None) == np.bool_
            ):
                raise ConfigError(
                    f"FilterOperator '{self.name}' ({where}): the predicate must return one "
                    f"boolean per record, got {type(value).__name__} {value!r} for record {i}. "
                    "Return e.g. element.data['label'] == 1."
                )
            out[i] = bool(value)
        return out

    def check_output(self, spec: Batch, where: str) -> None:
        """Refuse a predicate that does not give one boolean per record of ``spec``."""
        batch = jax.tree.map(lambda s: jax.ShapeDtypeStruct((2, *s.shape), s.dtype), spec)
        try:
            out = jax.eval_shape(self.keep, batch)
        except ConfigError as err:  # the predicate's result, already explained
            raise ConfigError(f"{where}: {err}") from err
        except Exception as err:  # noqa: BLE001 - reported with the stage's name
            hint, cause = "", f"{err}"
            if isinstance(err, TRACER_ERRORS):  # JAX's tracer id and line say nothing here
                cause = first_line(err) + "."
                hint = (
                    "\nThe predicate runs compiled (traced over a batch): write it with "
                    "jax.numpy — & | ~ instead of and / or / not, jnp.where instead of if, "
                    "x.astype(...) instead of int() or float(), no np.asarray() of a "
                    "field."  # over a host source the pipeline adds on_host=True (filtered.py)
                )
            raise ConfigError(
                f"{where} (FilterOperator '{self.name}'): the predicate failed on the "
                f"records it sees (fields {sorted(spec)}): {type(err).__name__}: {cause}{hint}"
            ) from err
        if getattr(out, "shape", None) != (2,) or out.dtype != jnp.bool_:
            got = jax.tree.map(lambda s: f"{s.dtype}{list(s.shape[1:])}", out)
            raise ConfigError(
                f"{where} (FilterOperator '{self.name}'): the predicate must return one "
                f"boolean per record, got {got} per record. Return e.g. "
                "element.data['label'] == 1 (compare, or cast with .astype(bool))."
            )

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """The kept records of ``data`` (eager only: the count is not known in a trace)."""
        leaves = jax.tree.leaves(data, is_leaf=is_host_leaf)
        if any(isinstance(v, jax.core.Tracer) for v in leaves):
            raise DataraxError(
                f"FilterOperator '{self.name}' cannot run inside a traced function: how many "
                "records it keeps is known only after it runs. Put it in a Pipeline's "
                "stages, which hands out full batches of kept records."
            )
        if any(is_host_leaf(v) for v in leaves):
            mask = self.keep_records(data, "apply_batch")
        else:
            mask = np.asarray(self.keep(data)).astype(bool)
        return take_records(data, np.flatnonzero(mask))
