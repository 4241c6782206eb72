"""``HFEagerSource``: a Hugging Face split loaded once into device arrays."""

from __future__ import annotations

import numpy as np
from flax import nnx

from datarax.sources._columns import select_keys, text_on_host
from datarax.sources._dataset_config import check_config_type, empty_split
from datarax.sources.hf.arrow import table_to_columns
from datarax.sources.hf.config import HFEagerConfig
from datarax.sources.hf.locate import (
    check_split,
    datasets_module,
    open_splits,
    split_parts,
)
from datarax.sources.memory import MemorySource


class HFEagerSource(MemorySource):
    """A Hugging Face split loaded once into device arrays (indexed, compiled path).

    Everything about serving is :class:`~datarax.sources.MemorySource`'s: Feistel
    shuffle keyed by ``seed + epoch``, ``record_indices_at`` (stable index = row in the
    split), ``len``, ``element_spec`` and ``{"current_index", "current_epoch"}`` state.
    Text fields are kept on the host (``object`` arrays of ``str``) and served with
    the records they belong to.

    Example:
        >>> from datarax.sources import HFEagerSource, HFEagerConfig
        >>> src = HFEagerSource(HFEagerConfig(name="my_local_folder", split="train",  # doctest: +SKIP
        ...                                   exclude_keys=("sentence",), shuffle=True))
        >>> src.get_batch_at(0, 4)["label"]  # doctest: +SKIP
    """

    config: HFEagerConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(
        self,
        config: HFEagerConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        check_config_type("HFEagerSource", config, HFEagerConfig)
        where = "HFEagerSource"
        columns = _load_eager_columns(config, where)
        super().__init__(config, columns, rngs=rngs, name=name)  # type: ignore[arg-type]


def _load_eager_columns(config: HFEagerConfig, where: str) -> dict[str, np.ndarray]:
    datasets = datasets_module(where)
    splits = open_splits(config, streaming=False, where=where)
    check_split(splits, config, where)
    lengths = {k: len(v) for k, v in splits.items()}
    parts = []
    for spec in split_parts(config.split, where):
        part = splits[spec.name]
        lo, hi = spec.bounds(lengths[spec.name])
        if (lo, hi) != (0, len(part)):
            part = part.select(range(lo, hi))
        parts.append(part)
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    keys = select_keys(list(ds.column_names), config.include_keys, config.exclude_keys, where=where)
    if len(ds) == 0:
        raise empty_split(config, where)
    table = ds.select_columns(keys).with_format("arrow")[:]
    columns = table_to_columns(table, keys, config, where, features=ds.features)
    return text_on_host(columns)
