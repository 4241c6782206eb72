"""The pipeline-level table: filter, take, skip and repeat (pipeline_rows.py) through the
source table's clauses, with the same checks (datarax.testing.conformance).

Test ids are ``check[row]``. Filter rows run every clause of test_table.py but two:
shards (each process filters its own share, so shares keep different numbers of
records: docs/filtering.md, "Combinations") and a direct read of the source (it reads
records the filter has not seen). Take / skip / repeat rows resume from their
iterator's own state (``get_state`` / ``set_state``) at every batch boundary, with a
stochastic stage so the per-record draws must continue too. The default run checks
the cheap clauses; ``-m slow`` the rest.
"""

from __future__ import annotations

import pytest

from datarax.testing import conformance

from pipeline_rows import (
    DEFAULT_FILTER_CLAUSES,
    DEFAULT_VIEW_ROWS,
    FILTER_ROWS,
    VIEW_ROWS,
)
from rows import BATCH, noise_stages


def _rows(table: dict, default: bool = True, default_rows: tuple[str, ...] | None = None):
    """``table``'s rows as indirect params; slow unless ``default`` (and in ``default_rows``)."""
    params = []
    for name in table:
        cheap = default and (default_rows is None or name in default_rows)
        params.append(pytest.param(name, id=name, marks=[] if cheap else [pytest.mark.slow]))
    return pytest.mark.parametrize("row", params, indirect=True)


def _filter_rows(clause: str):
    return _rows(FILTER_ROWS, default=clause in DEFAULT_FILTER_CLAUSES)


@pytest.fixture
def row(request, table_dir):
    build = FILTER_ROWS.get(request.param) or VIEW_ROWS[request.param]
    return build(table_dir)


# ------------------------------------------------------------ filter: resume
@_filter_rows("iterator")
def test_filter_resume_from_iterator_state_at_every_boundary(row):
    assert conformance.check_resume(row, "iterator", stages=noise_stages) > 0


@_filter_rows("pipeline")
def test_filter_resume_from_pipeline_state(row):
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "pipeline", points=points) > 0


@_filter_rows("source")
def test_filter_resume_from_source_state(row):
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "source", points=points) > 0


@_filter_rows("nnx")
def test_filter_resume_from_nnx_state(row):
    points = conformance.key_points(row, BATCH)
    assert conformance.check_resume(row, "nnx", points=points, stages=noise_stages) > 0


@_filter_rows("orbax")
def test_filter_resume_from_nnx_state_through_orbax(row, tmp_path):
    pytest.importorskip("orbax.checkpoint")
    conformance.check_resume(
        row, "nnx", points=conformance.key_points(row, BATCH),
        nnx_round_trip=conformance.orbax_round_trip(tmp_path),
    )


@pytest.mark.parametrize("level", ["pipeline", "source", "nnx"])
@_filter_rows("every boundary")
def test_filter_resume_at_every_boundary(row, level):
    assert conformance.check_resume(row, level, stages=noise_stages) > 0


@_filter_rows("three epochs")
def test_filter_resume_across_three_epochs_at_every_level(row):
    for level in ("iterator", "pipeline", "source", "nnx"):
        conformance.check_resume(row, level, num_epochs=3, stages=noise_stages)


@pytest.mark.parametrize("level", ["source", "nnx"])
@_filter_rows("live")
def test_filter_source_restored_under_a_live_iterator_continues_from_there(row, level):
    conformance.check_restore_live(row, level, stages=noise_stages)


# ------------------------------------------------------------ filter: the rest
@_filter_rows("nnx_small")
def test_filter_nnx_state_is_small_arrays(row):
    conformance.check_nnx_state_small(row)


@_filter_rows("epochs")
def test_filter_epochs_in_a_row_serve_every_kept_record_once(row):
    conformance.check_epochs(row, num_epochs=3)


@_filter_rows("spec")
def test_filter_batches_match_element_spec(row):
    conformance.check_spec(row)


@_filter_rows("kind")
def test_filter_source_declares_its_kind(row):
    conformance.check_kind(row)


@_filter_rows("threads")
def test_filter_close_releases_threads(row, young_heap):
    conformance.check_close_releases_threads(row)


# ---------------------------------------------------- take / skip / repeat
@_rows(VIEW_ROWS, default_rows=DEFAULT_VIEW_ROWS)
def test_view_resume_from_its_iterator_state_at_every_boundary(row):
    """take(n) / skip(n) / repeat(k) iterators: get_state() after 0 .. the last batch of
    three loops, restored into a fresh pipeline's iterator: the same batches (records
    and per-record draws), each loop ending where it did."""
    assert conformance.check_resume(row, "iterator", stages=noise_stages) > 0
