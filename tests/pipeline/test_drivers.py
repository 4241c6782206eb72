"""One iterator, two drivers: a host source read on the loop's thread (``prefetch=0``)
and read ahead serve the same batches and leave the same state after every batch; a
filtered pass moved from outside continues from where it was moved to."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

from int_record_files import int_source, write_int_parts


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return write_int_parts(tmp_path_factory.mktemp("drivers"), (9, 23))


def state(p: Pipeline) -> dict:
    """``p``'s state as JSON, less the records read ahead (information only)."""
    out = json.loads(json.dumps(p.get_state()))
    del out["source"]["prefetch_cache"]
    return out


def served(paths, prefetch: int) -> list[tuple[list[int], dict]]:
    """Each batch of two epochs and the pipeline's state after it."""
    source = int_source(paths, seed=2, shuffle_files=True, num_threads=2)
    p = Pipeline(source=source, batch_size=4, prefetch=prefetch, seed=0)
    out = [(np.asarray(b["x"]).tolist(), state(p)) for _ in range(2) for b in p]
    source.close()
    return out


def test_prefetch_0_and_read_ahead_serve_the_same_batches_and_states(paths):
    here = served(paths, 0)
    assert here == served(paths, 3)
    assert sorted(x for batch, _ in here[: len(here) // 2] for x in batch) == list(range(23))
    assert [state["position"] for _, state in here][:6] == [4, 8, 12, 16, 20, 23]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_filtered_pass_moved_from_outside_continues_from_there(prefetch):
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(20, dtype=np.int32)})
    keep = FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)
    p = Pipeline(source=src, stages=[keep], batch_size=3, prefetch=prefetch, seed=0)
    it = iter(p)
    assert np.asarray(next(it)["x"]).tolist() == [0, 2, 4]
    src.seek(0, 11)  # moved from outside, between batches
    assert [np.asarray(b["x"]).tolist() for b in it] == [[12, 14, 16], [18]]
    assert (p.epoch, p.position) == (1, 0)


def test_a_direct_read_between_batches_on_the_loops_thread_is_not_served_again(paths):
    whole = [x for batch, _ in served(paths, 0)[:6] for x in batch]
    source = int_source(paths, seed=2, shuffle_files=True, num_threads=2)
    p = Pipeline(source=source, batch_size=4, prefetch=0, seed=0)
    it = iter(p)
    first = np.asarray(next(it)["x"]).tolist()
    direct = np.asarray(source.get_batch(5)["x"]).tolist()  # the source's own read
    rest = [x for b in it for x in np.asarray(b["x"]).tolist()]
    source.close()
    assert (first, direct, rest) == (whole[:4], whole[4:9], whole[9:])


@pytest.mark.parametrize("filtered", [False, True])
def test_positions_past_int32_are_refused_by_both_compiled_dispatches(filtered):
    """Epoch 2**29 of a 4-record source starts past 2**31 global positions: with x64
    off, the plain and the filtered dispatch refuse it with the same message."""
    src = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    stages = [FilterOperator(predicate=lambda r: r.data["x"] >= 0)] if filtered else []
    p = Pipeline(source=src, stages=stages, batch_size=2)
    p.source.seek(2**29, 0)
    with pytest.raises(OverflowError, match=r"epoch 536870912 of a 4-record source passes "
                       r"2\*\*31 global record positions; enable jax_enable_x64"):
        next(iter(p))
