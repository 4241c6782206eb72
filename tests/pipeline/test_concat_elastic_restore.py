"""ConcatSource and a state saved by another number of processes (docs/combining.md):
an indexed concatenation re-splits what is left, a host one refuses it."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import StateError
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def memory(lo, hi, seed):
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"data": np.arange(lo, hi, dtype=np.int32)})


def test_indexed_concatenation_restores_on_another_process_count_host_refuses(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(100, 108, dtype=np.int32))

    def concat(kind):
        second = memory(20, 27, 2) if kind == "indexed" else NpySource(
            NpySourceConfig(paths=str(tmp_path / "x.npy")))
        return ConcatSource([memory(0, 9, 1), second])

    for kind in ("indexed", "host"):
        saved = [Pipeline(concat(kind), batch_size=2, shard_index=i, shard_count=2)
                 for i in range(2)]
        served = [x for p in saved for x in np.asarray(next(iter(p))["data"]).tolist()]
        one = Pipeline(concat(kind), batch_size=2)
        if kind == "host":
            with pytest.raises(StateError, match="Restore it on 2 processes"):
                one.set_state(saved[0].get_state())
            continue
        one.set_state(saved[0].get_state())
        rest = [x for b in one for x in np.asarray(b["data"]).tolist()]
        assert sorted(served + rest) == list(range(9)) + list(range(20, 27))
