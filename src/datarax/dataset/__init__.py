"""Self-describing datasets on ArrayRecord: the format, the writer and ``convert``.

:mod:`datarax.dataset.format` defines the record layout and the metadata file;
:mod:`datarax.dataset.writer` writes shards from any records (:func:`write_dataset`);
:mod:`datarax.dataset.conversion` turns files on disk (Parquet, JSONL, CSV, Hugging Face,
TFDS, image folders, ``.npy``) into a dataset (:func:`convert`, ``datarax convert``).
``ArrayRecordSourceModule(config, paths=<dataset folder>)`` reads one back.

Each name is imported from its module on first use, so a writer's worker process that
imports :mod:`datarax.dataset.writer` loads NumPy and array_record, not JAX or Flax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.dataset.conversion import convert, open_rows
    from datarax.dataset.format import (
        FORMAT_VERSION,
        METADATA_FILE,
        DatasetInfo,
        Features,
        Field,
        RecordMismatchError,
        ShardInfo,
        decode_records,
        encode_record,
        infer_features,
        read_metadata,
        shard_name,
        write_metadata,
    )
    from datarax.dataset.writer import ConversionError, WriteSummary, write_dataset

__all__ = [
    "ConversionError",
    "WriteSummary",
    "convert",
    "open_rows",
    "write_dataset",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "DatasetInfo",
    "Features",
    "Field",
    "RecordMismatchError",
    "ShardInfo",
    "decode_records",
    "encode_record",
    "infer_features",
    "read_metadata",
    "shard_name",
    "write_metadata",
]

# Each exported name and the module that defines it.
_HOMES = {
    **dict.fromkeys(("convert", "open_rows"), "datarax.dataset.conversion"),
    **dict.fromkeys(("ConversionError", "WriteSummary", "write_dataset"), "datarax.dataset.writer"),
    **dict.fromkeys(
        ("FORMAT_VERSION", "METADATA_FILE", "DatasetInfo", "Features", "Field", "RecordMismatchError",
         "ShardInfo", "decode_records", "encode_record", "infer_features", "read_metadata",
         "shard_name", "write_metadata"),
        "datarax.dataset.format"),
}

__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
