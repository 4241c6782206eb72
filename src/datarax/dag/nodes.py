"""Nodes that split a batch's fields into branches and merge branches back.

An operator node with several predecessors gets their fields joined as by
``Merge(naming="{field}")``.

Example:
    >>> import numpy as np
    >>> SelectFields("x").apply_batch({"x": np.ones(2), "y": np.zeros(2)}, None).keys()
    dict_keys(['x'])
    >>> out = Merge().merge({"a": {"x": np.ones(2)}, "b": {"x": np.zeros(2)}})
    >>> sorted(out)
    ['a_x', 'b_x']
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.operator import OperatorModule
from datarax.typing import Batch


@dataclass(frozen=True)
class SelectFieldsConfig(StructuralConfig):
    """Fields kept (``fields``) and their names in the output (``rename``: old -> new pairs)."""

    fields: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.fields or not all(isinstance(f, str) for f in self.fields):
            raise ConfigError(f"SelectFields needs one or more field names, got {self.fields!r}.")
        twice = sorted({f for f in self.fields if self.fields.count(f) > 1})
        if twice:
            raise ConfigError(f"SelectFields selects {twice[0]!r} twice; list each field once.")
        unknown = [old for old, _ in self.rename if old not in self.fields]
        if unknown:
            raise ConfigError(f"SelectFields rename names {unknown}, which are not selected.")
        rename = dict(self.rename)
        for old, new in self.rename:
            if not isinstance(new, str):
                raise ConfigError(f"SelectFields: rename {old!r} to a string, got {new!r}.")
        named: dict[str, str] = {}
        for f in self.fields:
            out = rename.get(f, f)
            if out in named:
                raise ConfigError(
                    f"SelectFields: both {named[out]!r} and {f!r} would be named {out!r}, and "
                    "one would be lost; give each output field its own name."
                )
            named[out] = f


class SelectFields(OperatorModule):
    """Keep only ``fields`` of the input batch (a branch of a graph)."""

    per_record: ClassVar[bool] = True

    def __init__(self, *fields: str, rename: Mapping[str, str] | None = None, name: str | None = None) -> None:
        config = SelectFieldsConfig(tuple(fields), tuple(sorted((rename or {}).items())))
        super().__init__(config, name=name or f"SelectFields[{', '.join(fields)}]")

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        missing = [f for f in self.config.fields if f not in data]
        if missing:
            raise DataraxError(
                f"{self.name}: the input has no field(s) {missing}; it has {sorted(data)}."
            )
        rename = dict(self.config.rename)
        return {rename.get(f, f): data[f] for f in self.config.fields}


@dataclass(frozen=True)
class MergeConfig(StructuralConfig):
    """``naming``: output name of field ``{field}`` of input node ``{node}``."""

    naming: str = "{node}_{field}"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.naming, str) or "{field}" not in self.naming:
            raise ConfigError(
                f"Merge naming must contain '{{field}}', got {self.naming!r}; e.g. "
                "'{node}_{field}' or '{field}'."
            )
        try:
            names = [n for _, n, _, _ in string.Formatter().parse(self.naming) if n is not None]
        except ValueError as err:
            raise ConfigError(f"Merge naming {self.naming!r} is not a valid format: {err}.") from None
        bad = [n for n in names if n not in ("node", "field")]
        if bad:
            raise ConfigError(
                f"Merge naming {self.naming!r} uses {{{bad[0]}}}; it can use only {{node}} "
                "and {field} (write a literal brace as '{{' or '}}')."
            )


class Merge(OperatorModule):
    """Join the outputs of several graph nodes into one batch (see the module docstring)."""

    per_record: ClassVar[bool] = True

    def __init__(self, naming: str = "{node}_{field}", *, name: str | None = None) -> None:
        super().__init__(MergeConfig(naming), name=name or "Merge")

    def merge(self, inputs: Mapping[str, Batch]) -> Batch:
        """One batch from ``{node name: batch}``."""
        return join_fields(inputs, self.config.naming, self.name)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        return dict(data)  # one input: nothing to join


def join_fields(inputs: Mapping[str, Batch], naming: str, owner: str) -> Batch:
    """Fields of every input under ``naming``; a name two inputs give is refused."""
    out: Batch = {}
    origin: dict[str, str] = {}
    for node, batch in inputs.items():
        for field, value in batch.items():
            key = naming.format(node=node, field=field)
            if key in out:
                raise DataraxError(
                    f"{owner}: field '{key}' comes from both '{origin[key]}' and '{node}'; "
                    "merge them with Merge() (fields named '{node}_{field}') or select "
                    "different fields."
                )
            out[key] = value
            origin[key] = node
    return out
