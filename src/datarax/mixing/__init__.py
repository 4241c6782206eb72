"""Weighted mixtures of sources: :class:`MixSource` and the schedule behind it."""

from datarax.mixing.schedule import MixSchedule
from datarax.mixing.source import MixSource, MixSourceConfig

__all__ = ["MixSchedule", "MixSource", "MixSourceConfig"]
