"""Self-describing datasets on ArrayRecord: the format, the writer and ``convert``.

:mod:`datarax.dataset.format` describes the format;
:mod:`datarax.dataset.writer` writes shards from any records (:func:`write_dataset`);
:mod:`datarax.dataset.conversion` turns files on disk (Parquet, JSONL, CSV, Hugging Face,
TFDS, image folders, ``.npy``) into a dataset (:func:`convert`, ``datarax convert``).
``ArrayRecordSourceModule(config, paths=<dataset folder>)`` reads one back.

Each name is imported on first use (a writer's worker process loads no JAX or Flax).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.dataset.conversion import convert, open_rows
    from datarax.dataset.fields import Features, Field, RecordMismatchError, infer_features
    from datarax.dataset.labels import LabelEncoder
    from datarax.dataset.layout import decode_records, encode_record
    from datarax.dataset.metadata import (
        FORMAT_VERSION,
        METADATA_FILE,
        WRITER_OPTIONS,
        DatasetInfo,
        ShardInfo,
        read_metadata,
        shard_info,
        shard_name,
        write_metadata,
    )
    from datarax.dataset.write_outcome import ConversionError, WriteSummary
    from datarax.dataset.writer import write_dataset

# Each exported name and the module that defines it.
_HOMES = {
    **dict.fromkeys(("convert", "open_rows"), "datarax.dataset.conversion"),
    **dict.fromkeys(("ConversionError", "WriteSummary"), "datarax.dataset.write_outcome"),
    "write_dataset": "datarax.dataset.writer",
    "LabelEncoder": "datarax.dataset.labels",
    **dict.fromkeys(("Features", "Field", "RecordMismatchError", "infer_features"),
                    "datarax.dataset.fields"),
    **dict.fromkeys(("decode_records", "encode_record"), "datarax.dataset.layout"),
    **dict.fromkeys(
        ("FORMAT_VERSION", "METADATA_FILE", "WRITER_OPTIONS", "DatasetInfo", "ShardInfo",
         "read_metadata", "shard_info", "shard_name", "write_metadata"),
        "datarax.dataset.metadata"),
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = [
    "convert", "open_rows", "ConversionError", "WriteSummary", "write_dataset",
    "LabelEncoder", "Features", "Field", "RecordMismatchError", "infer_features",
    "decode_records", "encode_record", "FORMAT_VERSION", "METADATA_FILE",
    "WRITER_OPTIONS", "DatasetInfo", "ShardInfo", "read_metadata", "shard_info",
    "shard_name", "write_metadata",
]

__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
