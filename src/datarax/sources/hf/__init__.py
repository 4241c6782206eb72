"""Hugging Face ``datasets`` sources: eager (device arrays) and streaming (host reads).

* :class:`HFEagerSource` loads a split once into device arrays and is an *indexed*
  source (the compiled pipeline path): it is a :class:`~datarax.sources.MemorySource`
  filled from the dataset, with the same Feistel shuffle (``seed + epoch``), stable
  indices and tiny state. Text fields stay on the host (``object`` arrays of
  ``str``), gathered by the same record indices as the device fields and handed to
  operators; :class:`~datarax.sources.LabelEncoder` turns a string label into
  ``int32`` ids that ride the compiled path.
* :class:`HFStreamingSource` wraps a ``datasets.IterableDataset``
  (``load_dataset(..., streaming=True)``), reads Arrow chunks of ``chunk_size``
  records and keeps memory bounded by ``chunk_size`` (plus ``shuffle_buffer_size``
  when shuffling). Its batches carry text fields as lists of ``str`` that operators
  can read and route. Each pass (``for batch in pipeline``) re-opens the stream;
  ``get_state()`` is ``{"current_index", "current_epoch"}`` and ``set_state`` resumes
  exactly by re-opening the same pass and skipping the records already handed out
  (read as Arrow, not decoded), so resume costs one forward read of those records.
  With ``on_error="skip"`` a record that cannot be converted to the declared fields
  is dropped, counted (state key ``"skipped"``) and reported (``skipped_records()``).

``name`` may be a Hub id (``"stanfordnlp/sst2"``), a local folder of data files
(parquet/json/csv/arrow, laid out as on the Hub: ``data/train-*.parquet`` ...), a
folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or a data
file / glob (``"data/*.parquet"``). A name that is a local folder is read from
there, never from the Hub, which is how offline use works. ``split`` accepts HF slice
syntax (``"train[:1000]"``, ``"train[10%:20%]"``, ``"train+validation"``); a
streaming source needs the split's size for percent or negative slices.

``Image`` features are decoded to uint8 arrays (one shape per field). 64-bit
columns follow :mod:`datarax.sources._columns`: with ``jax_enable_x64`` off,
int64 labels become int32 when every value fits (checked), float64 is refused unless
``cast_float64=True``.

Needs the ``hf`` extra: ``pip install "datarax[hf]"``.
"""

from datarax.sources.hf.config import HFEagerConfig, HFStreamingConfig
from datarax.sources.hf.eager import HFEagerSource
from datarax.sources.hf.factory import EAGER_MAX_BYTES, from_hf
from datarax.sources.hf.streaming import HFStreamingSource

__all__ = [
    "EAGER_MAX_BYTES",
    "HFEagerConfig",
    "HFEagerSource",
    "HFStreamingConfig",
    "HFStreamingSource",
    "from_hf",
]
