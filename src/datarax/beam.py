"""Apache Beam for datasets bigger than one machine (``pip install "datarax[beam]"``).

See :mod:`datarax.dataset.beam`.

Example:
    >>> import os, tempfile
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> info, summary = convert_rows([{"id": i, "name": f"r{i}"} for i in range(6)], dst, shards=2)
    >>> info.num_records, [s.records for s in info.shards]
    (6, [3, 3])
"""

from datarax.dataset.beam import (
    RECORDS_PER_SHARD,
    WriteDataset,
    convert_rows,
    direct_runner,
    record_digest,
)

__all__ = ["RECORDS_PER_SHARD", "WriteDataset", "convert_rows", "direct_runner", "record_digest"]
