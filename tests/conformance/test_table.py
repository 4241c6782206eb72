"""The conformance table: every source (rows.py) through every contract check.

Test ids are ``check[row]``. A new source joins with one row in ``rows.ROWS``; a new
contract clause with one check here (and its function in datarax.testing.conformance).
Filter, take, skip and repeat rows: test_pipeline_table.py.
"""

from __future__ import annotations

import importlib.util

import pytest

from datarax.testing import conformance

from rows import BATCH, PENDING, ROWS, SLOW_CLAUSES, noise_stages


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
