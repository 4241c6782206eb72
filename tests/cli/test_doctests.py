"""The docstring examples of the CLI and metrics modules run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "datarax.cli.targets",
    "datarax.cli.charts",
    "datarax.cli.inspect_source",
    "datarax.metrics",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0
