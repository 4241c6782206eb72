"""The self-describing dataset format: records on ArrayRecord shards plus one JSON file.

Three modules define it, and this one names all of their parts in one place:

* :mod:`datarax.dataset.fields` — what each field is and how it is encoded
  (:class:`Features` of :class:`Field` s, :func:`infer_features`);
* :mod:`datarax.dataset.layout` — one record's bytes (:func:`encode_record`) and a batch
  decoded into columns (:func:`decode_records`);
* :mod:`datarax.dataset.metadata` — the shards' names (:func:`shard_name`) and the
  metadata file (:class:`DatasetInfo`, :func:`write_metadata` / :func:`read_metadata`).

**Writing shards elsewhere**: encode each record with :func:`encode_record`, write shard
``i`` of ``n`` with ``ArrayRecordWriter(path, WRITER_OPTIONS)`` to a temporary name, rename
it to ``shard_name(i, n)``, collect :func:`shard_info` of each finished shard (by its final
name) and finish with :func:`write_metadata`.

Example:
    >>> import numpy as np
    >>> feats = infer_features({"x": np.float32([1, 2]), "label": 3, "name": "a"})
    >>> recs = [encode_record(feats, {"x": np.float32([i, i]), "label": i, "name": f"r{i}"})
    ...         for i in range(3)]
    >>> out = decode_records(feats, recs)
    >>> out["x"][:, 0].tolist(), out["label"].tolist(), list(out["name"])
    ([0.0, 1.0, 2.0], [0, 1, 2], ['r0', 'r1', 'r2'])
"""

from __future__ import annotations

from datarax.dataset.fields import (
    ENCODINGS,
    Features,
    Field,
    RecordMismatchError,
    infer_features,
    infer_field,
)
from datarax.dataset.layout import decode_records, encode_record
from datarax.dataset.metadata import (
    FORMAT_NAME,
    FORMAT_VERSION,
    METADATA_FILE,
    WRITER_OPTIONS,
    DatasetInfo,
    ShardInfo,
    find_dataset,
    read_metadata,
    shard_info,
    shard_name,
    write_metadata,
)

__all__ = [
    "ENCODINGS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "WRITER_OPTIONS",
    "DatasetInfo",
    "Field",
    "Features",
    "RecordMismatchError",
    "ShardInfo",
    "decode_records",
    "encode_record",
    "find_dataset",
    "infer_features",
    "infer_field",
    "read_metadata",
    "shard_info",
    "shard_name",
    "write_metadata",
]
