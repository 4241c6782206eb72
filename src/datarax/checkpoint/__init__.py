"""Orbax integration: the data pipeline's state saved and restored with the model's.

Needs ``pip install "datarax[checkpoint]"``. See ``examples/checkpoint/orbax_manager.py``
for a complete training loop.
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
