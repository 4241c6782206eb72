"""Each bad input gives the exact error type and message listed in docs/errors.md."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from bad_inputs import CASES, expected_match, run_case

ROOT = Path(__file__).resolve().parents[2]


def test_catalogue_has_at_least_forty_cases():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_exact_error(case, tmp_path):
    if case.needs:
        try:
            importlib.import_module(case.needs)
        except ImportError as err:
            pytest.skip(f"needs {case.needs}: {err}")
    err = run_case(case, tmp_path)
    assert isinstance(err, case.error), f"{case.id}: got {type(err).__name__}: {err}"
    assert expected_match(case, tmp_path) in str(err), f"{case.id}: message was: {err}"
    if case.field is not None:
        assert getattr(err, "field", None) == case.field


def test_docs_errors_lists_every_case():
    text = (ROOT / "docs" / "errors.md").read_text()
    missing = [c.id for c in CASES if f"`{c.id}`" not in text]
    assert not missing, f"docs/errors.md lacks {missing}; regenerate it (see its header)"
