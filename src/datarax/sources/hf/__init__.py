"""Hugging Face ``datasets`` sources: :class:`HFEagerSource` loads a split once into
device arrays (an indexed :class:`~datarax.sources.MemorySource`, text kept on the host),
:class:`HFStreamingSource` reads a stream's Arrow chunks on the host (bounded memory,
exact resume, ``on_error="skip"``); :func:`from_hf` picks one. ``docs/sources/hf.md``
says what ``name`` and ``split`` may be and how fields are converted.

Needs the ``hf`` extra: ``pip install "datarax[hf]"``.
"""

from datarax.sources.hf.config import HFEagerConfig, HFStreamingConfig
from datarax.sources.hf.eager import HFEagerSource
from datarax.sources._dataset_config import EAGER_MAX_BYTES
from datarax.sources.hf.factory import from_hf
from datarax.sources.hf.streaming import HFStreamingSource

__all__ = [
    "EAGER_MAX_BYTES",
    "HFEagerConfig",
    "HFEagerSource",
    "HFStreamingConfig",
    "HFStreamingSource",
    "from_hf",
]
