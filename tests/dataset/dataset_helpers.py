"""Shared helpers of the dataset tests: a small PNG, and a dataset folder read back whole."""

from __future__ import annotations

import io
import os

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from datarax.dataset import decode_records, read_metadata


def png(value: int, size: int = 4) -> bytes:
    """A ``size`` x ``size`` RGB PNG whose every pixel is ``value``."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def read_dataset(dst: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every record of the dataset folder ``dst``, shard by shard, as one array per field."""
    info = read_metadata(dst)
    raws: list[bytes] = []
    for shard in info.shards:
        reader = ArrayRecordReader(os.path.join(dst, shard.file))
        raws += reader.read_all()
        reader.close()
    return decode_records(info.features, raws)
