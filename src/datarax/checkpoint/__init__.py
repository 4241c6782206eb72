"""Orbax integration: the data pipeline's state saved and restored with the model's.

Needs ``orbax-checkpoint`` (``pip install "datarax[checkpoint]"``; without it, importing
this package raises :class:`~datarax.core.errors.MissingExtraError` saying so).
:func:`checkpoint_manager` builds Orbax's ``CheckpointManager`` with a relative folder
made absolute (Orbax saves arrays only into an absolute one). See
``examples/checkpoint/orbax_manager.py`` for a complete training loop.
"""

from datarax.checkpoint.manager import (
    DATA_ITEM,
    checkpoint_manager,
    data_restore_args,
    data_save_args,
    restore,
    restore_data,
    save,
)

__all__ = [
    "DATA_ITEM", "checkpoint_manager", "data_restore_args", "data_save_args", "restore",
    "restore_data", "save",
]
