"""Local Hugging Face data for the tests, read offline (``tests/conftest.py`` puts this
folder on ``sys.path``; the ``hf_offline`` fixture keeps the Hub away).

``write_parquet`` writes one parquet file of columns, ``write_jsonl`` one JSON Lines file
of records; ``write_hub_split`` a split in the
Hub's layout (``data/train-00000-of-00002.parquet`` ...), which ``HFEagerConfig(name=
folder, split="train")`` reads; ``int32_lists`` a column of lists of ``int32`` (of
uneven lengths, to make records that do not batch); ``position_of`` a streaming
source's state less its settings.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest


def write_parquet(path: str | os.PathLike[str], columns: Mapping[str, Any]) -> str:
    """One parquet file at ``path`` (folders made) of ``columns`` (what ``pyarrow.table``
    takes: numpy arrays, lists, ``pyarrow`` arrays); returns ``str(path)``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(dict(columns)), path)
    return str(path)


def write_jsonl(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> str:
    """One JSON Lines file at ``path`` (folders made), a record a line; returns ``str(path)``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def write_hub_split(root: str | os.PathLike[str], columns: Mapping[str, Any], *,
                    rows_per_file: int | None = None, split: str = "train") -> str:
    """Split ``split`` of a folder laid out like a Hub repo: the rows of ``columns`` in
    files of ``rows_per_file`` rows (one file when None) named
    ``data/<split>-00000-of-0000N.parquet``; returns ``str(root)``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(dict(columns))
    step = rows_per_file or max(table.num_rows, 1)
    files = max(math.ceil(table.num_rows / step), 1)
    data = pathlib.Path(root) / "data"
    data.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        name = f"{split}-{f:05d}-of-{files:05d}.parquet"
        pq.write_table(table.slice(f * step, step), data / name)
    return str(root)


def int32_lists(rows: Sequence[Sequence[int]]) -> Any:
    """A ``pyarrow`` column of lists of ``int32``, one list a row."""
    pa = pytest.importorskip("pyarrow")
    return pa.array(rows, pa.list_(pa.int32()))


def position_of(state: dict) -> dict:
    """A parquet stream's source state less its ``settings`` (the config's, checked by
    other tests)."""
    assert state["settings"]["name"] == "parquet"
    return {k: v for k, v in state.items() if k != "settings"}
