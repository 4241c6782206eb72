"""TensorFlow Datasets sources: eager (device arrays) and streaming (host random access).

Both read a split through ``tfds.data_source`` — TFDS's random-access path over
ArrayRecord files, which needs no TensorFlow:

* :class:`TFDSEagerSource` reads the whole split once (through the shared
  :class:`~datarax.sources.host_reader.HostReader`) into device arrays and is an
  *indexed* source (the compiled path): a :class:`~datarax.sources.MemorySource`
  filled from the split, with its Feistel shuffle (``seed + epoch``), stable indices
  and ``{"current_index", "current_epoch"}`` state. Text fields stay on the host
  (``object`` arrays of ``str``), served with their records. A split prepared only as
  TFRecord is read through TensorFlow when it is installed.
* :class:`TFDSStreamingSource` keeps the split on disk and reads batches on host
  threads with :class:`~datarax.sources.host_reader.HostReader` (bounded read-ahead):
  global shuffle by the Feistel permutation (O(1) memory, ``seed + epoch``), this
  process's shard of every epoch, text fields as lists of ``str``, exact resume from a
  tiny state, and ArrayRecordSourceModule's bad-record policy (``on_error="skip"`` with a
  per-epoch skip budget).

``data_dir`` is where TFDS keeps prepared datasets (default: ``$TFDS_DATA_DIR`` or
``~/tensorflow_datasets``). With ``download=True`` (default) a dataset that is not
there yet is downloaded and prepared as ArrayRecord; ``download=False`` only reads.
A dataset already prepared only as TFRecord has no random access: the error says how
to re-prepare or convert it (and that TensorFlow is needed to read TFRecord).

Fields: nested feature dicts are flattened with ``/`` (``"objects/bbox"``); ``Text``
features are decoded to ``str``. 64-bit fields follow :mod:`datarax.sources._columns`
(int64 labels become int32 when every value fits, float64 refused unless
``cast_float64=True``) while ``jax_enable_x64`` is off.

Needs the ``tfds`` extra: ``pip install "datarax[tfds]"``.
"""

from datarax.sources.tfds.config import TFDSEagerConfig, TFDSStreamingConfig
from datarax.sources.tfds.eager import TFDSEagerSource
from datarax.sources.tfds.factory import EAGER_MAX_BYTES, from_tfds
from datarax.sources.tfds.streaming import TFDSStreamingSource

__all__ = [
    "EAGER_MAX_BYTES",
    "TFDSEagerConfig",
    "TFDSEagerSource",
    "TFDSStreamingConfig",
    "TFDSStreamingSource",
    "from_tfds",
]
