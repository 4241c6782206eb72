"""What :class:`~datarax.mixing.MixSource` checks of its sources before mixing them.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
    >>> b = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.float32)})
    >>> check_children(["a", "b"], [a, b], "epoch")
    Traceback (most recent call last):
    ...
    datarax.core.errors.SpecMismatchError: MixSource: field 'x' is int32() in source 'a' but float32() in source 'b'; cast or reshape one of them (e.g. with an operator) before mixing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.core import children as common
from datarax.core.data_source import skipping_setting
from datarax.core.errors import ConfigError, SourceContractError
from datarax.core.reading import forward_only, skips_in_position
from datarax.core.spec import check_same_fields, checked_spec


def check_children(names: list[str], children: list[Any], mode: str) -> None:
    """Refuse sources that cannot be mixed (see :class:`~datarax.mixing.MixSource`)."""
    common.check_children("MixSource", "source", [f"'{n}'" for n in names], children,
                          whole="the mixture")
    for name, child in zip(names, children):
        if mode == "sampling" and forward_only(child):
            raise SourceContractError(
                f"MixSource source '{name}' is a stream; sampling with replacement needs "
                "random access. Use mode='epoch' for streams."
            )
        if mode == "sampling" and skips_in_position(child):
            skipping = skipping_setting(child)  # its own on_error or a part's
            raise SourceContractError(
                f"MixSource source '{name}' skips bad records ({skipping}='skip'); sampling "
                "with replacement reads each draw's record by its number, so a record "
                "skipped as bad would leave its draw unserved. Use mode='epoch' (read in "
                "order, the bad record skipped once), or on_error='raise' and scan and fix "
                "the data first."
            )
        if child.epoch_size() == 0:
            raise ConfigError(f"MixSource source '{name}' holds no records.")
    check_same_fields("MixSource", [f"source '{n}'" for n in names],
                      [checked_spec(c) for c in children], "mixed", "mixing")


def check_compiled_keys(schedule: Any, names: tuple[str, ...], per_epoch: int | None) -> None:
    """Refuse a compiled read of an epoch whose records' stable indices (``draw * sources
    + source``) span more than ``2**32``: a compiled step keys a record on 32 bits of its
    index, so two records of one epoch would get the same random key."""
    if per_epoch is None:
        return
    n = len(names)
    most = schedule.max_counts(per_epoch)
    top = int(np.argmax(most))
    if int(most[top]) * n <= 2**32:
        return
    raise ConfigError(
        f"MixSource: an epoch of {per_epoch} records draws '{names[top]}' up to "
        f"{int(most[top])} times, and a record's stable index is its draw times {n} "
        f"sources plus its source's place: the epoch spans {int(most[top]) * n} indices, past "
        "2**32, and a compiled pass keys each record on 32 bits of its index, so records "
        "2**32 apart would get the same random key. Give records_per_epoch small enough "
        f"that no source is drawn more than {2**32 // n} times in an epoch."
    )
