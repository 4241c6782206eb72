"""``ErrorPolicy``: what a reading source does with a record it cannot read or decode.

The policy of :mod:`datarax.sources.skip_ledger` (which keeps the counts and reports),
in a module of its own that imports neither JAX nor Flax: decode worker processes
receive it with their reader.
"""

from __future__ import annotations

import dataclasses
import math

from datarax.errors import ConfigError
from datarax.host.counts import check_count

__all__ = ["ON_ERROR_CHOICES", "ErrorPolicy"]

ON_ERROR_CHOICES = ("raise", "skip")


@dataclasses.dataclass(frozen=True)
class ErrorPolicy:
    """What to do with a record that cannot be read or decoded.

    ``on_error="raise"`` stops with a :class:`RecordError`; ``"skip"`` drops the record
    and counts it. The skip budget is per epoch: at most ``max_skipped`` records and
    at most ``floor(max_skipped_fraction * records_in_epoch)``; ``None`` for both means
    unbounded (every skip is still counted and reported).

    Example:
        >>> ErrorPolicy("skip", max_skipped_fraction=0.01).budget(1000)
        10
    """

    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR_CHOICES:
            raise ConfigError(
                f"on_error must be one of {list(ON_ERROR_CHOICES)}, got {self.on_error!r}."
            )
        m = self.max_skipped
        if m is not None:
            check_count(m, "max_skipped", 0, " or None")
        f = self.max_skipped_fraction
        if f is not None and (
            isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0
        ):
            raise ConfigError(
                f"max_skipped_fraction must be None or a number in [0, 1], got {f!r}."
            )
        if self.on_error == "raise" and (m is not None or f is not None):
            raise ConfigError(
                "max_skipped / max_skipped_fraction only apply with on_error='skip'; "
                "set on_error='skip' or leave them None."
            )

    @property
    def skips(self) -> bool:
        return self.on_error == "skip"

    def budget(self, epoch_records: int | None) -> int | None:
        """Most records one epoch of ``epoch_records`` may skip (None: unbounded).

        With an unknown epoch size only ``max_skipped`` applies up front; the fraction
        is checked when the pass ends
        (:meth:`datarax.sources.skip_ledger.SkipLedger.check_pass_end`).
        """
        limits = []
        if self.max_skipped is not None:
            limits.append(self.max_skipped)
        if self.max_skipped_fraction is not None and epoch_records is not None:
            limits.append(int(math.floor(self.max_skipped_fraction * epoch_records)))
        return min(limits) if limits else None
