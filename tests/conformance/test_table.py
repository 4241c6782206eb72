"""The conformance table: every source (rows.py) through every contract check.

Test ids are ``check[row]``. A new source joins with one row in ``rows.ROWS``; a new
contract clause with one check here (and its function in datarax.testing.conformance).
Filter, take, skip and repeat rows: test_pipeline_table.py.
"""

from __future__ import annotations

import copy
import importlib.util
import re

import pytest

from datarax.core.errors import ConfigError
from datarax.testing import conformance, to_host

from rows import (BATCH, DEEPCOPY_ROWS, PENDING, ROWS, SLOW_CLAUSES, UNCOPYABLE, noise_stages,
                  pipeline_over)


def _marks(name: str, check: str = "") -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if check in SLOW_CLAUSES.get(name, ()) else []
    if name in PENDING:
        return [*marks, pytest.mark.xfail(strict=False, reason=PENDING[name])]
    return marks


@pytest.fixture
def row(request, table_dir):
    build, needs = ROWS[request.param]
    if needs is not None and importlib.util.find_spec(needs.split(".")[0]) is None:
        pytest.skip(f"{request.param} needs {needs}")
    return build(table_dir)


def parametrize_rows(test):
    params = [pytest.param(name, marks=_marks(name, test.__name__), id=name) for name in ROWS]
    return pytest.mark.parametrize("row", params, indirect=True)(test)


# ------------------------------------------------------------------ resume
# The default run checks every level at 0, mid-epoch 0, the end of epoch 0 (between
# epochs for the pipeline), mid-epoch 1 and the end of epoch 1; -m slow at every boundary.
@parametrize_rows
def test_resume_from_iterator_state(row):
    """iterator.get_state() at the key points of 2 epochs, restored into
    iter(fresh).set_state: the same batches (records and per-record draws)."""
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "iterator", points=points, stages=noise_stages) > 0


@parametrize_rows
def test_resume_from_pipeline_state(row):
    """pipeline.get_state() mid-epoch and between epochs, into fresh.set_state."""
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "pipeline", points=points) > 0


@parametrize_rows
def test_resume_from_source_state(row):
    """Seed 000 "Checkpointing": source.get_state() after k batches, a fresh source +
    Pipeline, source.set_state(state): the pipeline serves exactly the rest."""
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "source", points=points) > 0


@parametrize_rows
def test_resume_from_nnx_state(row):
    """nnx.update(fresh, nnx.state(old)) then iter(fresh) continues exactly."""
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "nnx", points=points, stages=noise_stages) > 0


@parametrize_rows
def test_resume_from_nnx_state_through_orbax(row, tmp_path):
    """nnx.state(pipeline) saved with Orbax StandardSave and restored against a fresh
    pipeline's state, then nnx.update(fresh, restored)."""
    conformance.check_resume(
        row, "nnx", points=conformance.key_points(row, BATCH),
        nnx_round_trip=conformance.orbax_round_trip(tmp_path),
    )


@pytest.mark.slow
@pytest.mark.parametrize("level", ["iterator", "pipeline", "source", "nnx"])
@parametrize_rows
def test_resume_at_every_boundary(row, level):
    assert conformance.check_resume(row, level, stages=noise_stages) > 0


@pytest.mark.slow
@parametrize_rows
def test_resume_from_nnx_state_through_orbax_at_every_boundary(row, tmp_path):
    conformance.check_resume(
        row, "nnx", stages=noise_stages, nnx_round_trip=conformance.orbax_round_trip(tmp_path)
    )


@pytest.mark.slow
@parametrize_rows
def test_resume_across_three_epochs_with_noise_at_every_level(row):
    for level in ("iterator", "pipeline", "source", "nnx"):
        conformance.check_resume(row, level, num_epochs=3, stages=noise_stages)


@pytest.mark.parametrize("level", ["source", "nnx"])
@parametrize_rows
def test_source_restored_under_a_live_iterator_continues_from_there(row, level):
    conformance.check_restore_live(row, level, stages=noise_stages)


@parametrize_rows
def test_a_direct_read_between_batches_is_served_once(row):
    """source.get_batch_with_indices right after a batch, racing the read-ahead worker
    over several passes: the records after those handed out, then the loop's rest."""
    kind = row.kind
    if kind is None:
        pipeline = row.make()
        kind = pipeline.source.kind.name
        row.close(pipeline)
    if kind == "INDEXED":
        pytest.skip("an indexed source's batches are computed from positions, not read")
    conformance.check_direct_read_live(row)


@parametrize_rows
def test_nnx_state_is_small_arrays(row):
    conformance.check_nnx_state_small(row)


# ------------------------------------------------------------------- copies
@pytest.mark.parametrize("row", [
    pytest.param(name, id=name, marks=[] if name in DEEPCOPY_ROWS else [pytest.mark.slow])
    for name in ROWS], indirect=True)
def test_deepcopy_of_the_source_is_an_independent_copy_at_its_position(row):
    """copy.deepcopy(source) after a pipeline's first batch: a pipeline over the copy
    and the original pipeline, read in turn, serve the same batches after it (neither
    moves the other); closing the copy leaves the original reading the epoch to its end."""
    pipeline = row.make()
    twin = None
    try:
        def ids(batch):
            return [int(i) for i in row.record_ids(to_host(batch))]

        batches = iter(pipeline)
        first = ids(next(batches))
        if row.name in UNCOPYABLE:
            named = re.escape(f"its attribute {UNCOPYABLE[row.name]}")
            with pytest.raises(ConfigError, match=named):
                copy.deepcopy(pipeline.source)
            return
        twin = pipeline_over(copy.deepcopy(pipeline.source), 0, 1, ())
        copied = iter(twin)
        served = list(first)
        for _ in range(2):
            mine, original = ids(next(copied)), ids(next(batches))
            assert mine == original and not set(mine) & set(first), (mine, original)
            served += original
        row.close(twin)  # the copy's files and threads are its own: the original reads on
        served += [i for batch in batches for i in ids(batch)]
        assert sorted(served) == list(range(row.num_records))
    finally:
        row.close(pipeline)
        if twin is not None:
            row.close(twin)


# ------------------------------------------------------------------ epochs
@parametrize_rows
def test_epochs_in_a_row_serve_every_record_once(row):
    conformance.check_epochs(row, num_epochs=3)


# ------------------------------------------------------------------ shards
@parametrize_rows
def test_shards_are_disjoint_equal_shares(row):
    conformance.check_shards(row, count=3)


# -------------------------------------------------------------------- spec
@parametrize_rows
def test_batches_match_element_spec(row):
    conformance.check_spec(row)


@parametrize_rows
def test_source_declares_its_kind(row):
    conformance.check_kind(row)


# ----------------------------------------------------------------- threads
@parametrize_rows
def test_close_releases_threads(row, young_heap):
    conformance.check_close_releases_threads(row)
