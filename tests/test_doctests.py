"""Every docstring example in datarax runs and prints what it says.

Modules state their invariants with a doctest (``core/keys.py``, ``sources/skip_ledger.py``);
this is what keeps those examples true.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import datarax

# walk_packages leaves out the top package itself: its docstring is the first a user reads
MODULES = ["datarax"] + sorted(
    m.name for m in pkgutil.walk_packages(datarax.__path__, "datarax.")
    if m.name != "datarax.__main__"
)
# Public modules whose docstrings must keep a runnable example.
WITH_EXAMPLES = {
    "datarax.core.cursor",
    "datarax.core.keys",
    "datarax.core.owned",
    "datarax.core.position",
    "datarax.core.share",
    "datarax.core.stream",
    "datarax.pipeline.pipeline",
    "datarax.pipeline.state",
    "datarax.sources.host_reader",
    "datarax.sources.random_access",
    "datarax.sources.skip_ledger",
    "datarax.sources.decoded_records",
    "datarax.sources.decode_processes",
    "datarax.sources.image_decoder",
    "datarax.sources.epoch_order",
    "datarax.sources.array_record_files",
    "datarax.sources.child_records",
    "datarax.sources.interleave",
    "datarax.sources.shuffle_buffer",
    "datarax.dataset.table_rows",
    "datarax.testing.resume",
    "datarax.cli.targets",
    "datarax.cli.charts",
    "datarax.cli.demo",
    "datarax.cli.inspect_source",
    "datarax.metrics",
    # homes of public classes whose class docstring points to the module's example
    "datarax.core.errors",
    "datarax.dag.nodes",
    "datarax.dag.operator",
    "datarax.dataset.labels",
    "datarax.mixing.source",
    "datarax.operators.element",
    "datarax.pipeline.iterator",
    "datarax.sharding.placement",
    "datarax.sources.concat",
    "datarax.sources.flat_map",
    "datarax.sources.memory",
    "datarax.sources.npy",
}


def test_the_module_list_holds_the_public_modules():
    assert WITH_EXAMPLES <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0
