"""Self-describing datasets on ArrayRecord: the format, the writer and ``convert``.

:mod:`datarax.dataset.format` defines the record layout and the metadata file;
:mod:`datarax.dataset.writer` writes shards from any records; :mod:`datarax.dataset.convert`
turns files on disk (Parquet, JSONL, CSV, Hugging Face, TFDS, image folders, ``.npy``)
into a dataset. ``ArrayRecordSourceModule(config, paths=<dataset folder>)`` reads one back.
"""

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

__all__ = [
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
