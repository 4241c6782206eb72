"""The public surface: the names ``datarax`` exports, loaded on first use, one name per class."""

import ast
import importlib
import inspect
import json
import pathlib
import subprocess
import sys

import pytest

import datarax

PACKAGES = ["datarax", "datarax.sources", "datarax.operators", "datarax.core", "datarax.pipeline",
            "datarax.samplers"]


def test_the_top_level_holds_the_names_a_program_starts_with():
    assert sorted(datarax.__all__) == [
        "ArrayRecordSourceConfig",
        "ArrayRecordSourceModule",
        "DataSourceModule",
        "DataraxError",
        "ElementOperator",
        "ElementOperatorConfig",
        "MemorySource",
        "MemorySourceConfig",
        "Pipeline",
        "StructuralConfig",
        "decode_images",
        "enable_compilation_cache",
        "from_hf",
        "from_tfds",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_and_is_listed_by_dir(package):
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        assert getattr(value, "__name__", name) == name, f"{package}.{name} is {value!r}"
    assert set(module.__all__) <= set(dir(module))


def test_top_level_names_are_the_subpackages_objects():
    from datarax.core.errors import DataraxError
    from datarax.operators import ElementOperator
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceModule, MemorySource, from_hf, from_tfds

    assert datarax.Pipeline is Pipeline
    assert datarax.MemorySource is MemorySource
    assert datarax.ArrayRecordSourceModule is ArrayRecordSourceModule
    assert datarax.ElementOperator is ElementOperator
    assert datarax.DataraxError is DataraxError
    assert datarax.from_hf is from_hf and datarax.from_tfds is from_tfds


def test_a_name_it_does_not_have_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'datarax' has no attribute 'Pipe'"):
        datarax.Pipe  # noqa: B018
    with pytest.raises(
        AttributeError, match="module 'datarax.sources' has no attribute 'ArrayRecordSource'"
    ):
        importlib.import_module("datarax.sources").ArrayRecordSource  # noqa: B018


@pytest.mark.parametrize("package", PACKAGES)
def test_each_class_is_exported_under_one_name(package):
    module = importlib.import_module(package)
    classes = [getattr(module, n) for n in module.__all__ if inspect.isclass(getattr(module, n))]
    assert len(classes) == len(set(classes))


def test_removed_aliases_are_gone():
    import datarax.sources
    import datarax.sources.random_access as random_access

    assert "ArrayRecordSource" not in datarax.sources.__all__
    assert not hasattr(datarax.sources, "ArrayRecordSource")
    assert not hasattr(random_access, "RandomAccessHostSource")


LOADED = """
import json, sys
loaded = {}
for statement in sys.argv[1:]:  # each adds to what the ones before it loaded
    before = set(sys.modules)
    exec(statement)
    loaded[statement] = sorted(set(sys.modules) - before)
print(json.dumps(loaded))
"""
IMPORT = "import datarax"
NAMES = "from datarax import MemorySource, Pipeline"


@pytest.fixture(scope="module")
def loaded_by() -> dict[str, set[str]]:
    """The modules each statement imports in one fresh interpreter (after jax and nnx):
    ``import datarax``, then what ``from datarax import MemorySource, Pipeline`` adds."""
    code = "import jax, jax.numpy\nfrom flax import nnx\n" + LOADED
    out = subprocess.run(
        [sys.executable, "-c", code, IMPORT, NAMES], capture_output=True, text=True,
        timeout=300, check=True,
    )
    return {k: set(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def test_import_datarax_imports_nothing_else(loaded_by):
    assert loaded_by[IMPORT] == {"datarax", "datarax.exports"}


def test_a_top_level_name_imports_only_what_it_needs(loaded_by):
    loaded = loaded_by[IMPORT] | loaded_by[NAMES]  # as from a fresh interpreter
    assert "datarax.pipeline.pipeline" in loaded and "datarax.sources.memory" in loaded
    assert not {
        "datarax.sources.array_record", "datarax.sources.hf", "datarax.sources.tfds",
        "datarax.mixing", "datarax.operators", "datarax.checkpoint",
        # a pipeline over memory reads no files: no host reader, no object storage
        "datarax.pipeline.driver_cursor", "datarax.sources.skip_ledger",
        "datarax.storage", "datarax.storage.fetch", "datarax.storage.cache",
        # nor what only other features use: rebatching, stream sources, samplers
        "datarax.pipeline.rebatch", "datarax.core.stream", "datarax.samplers.samplers",
    } & loaded
    heavy = {"tensorflow", "torch", "datasets", "tensorflow_datasets", "orbax", "array_record"}
    assert not heavy & {name.split(".")[0] for name in loaded}


def test_each_top_level_name_is_in_the_subpackages_the_api_page_names():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| (`[^|]+`) \| (`[^|]+`) \| .*\|$", page, re.MULTILINE)
    assert len(rows) >= 8
    for names, homes in rows:
        for name in re.findall(r"`([^`]+)`", names):
            for home in re.findall(r"`([^`]+)`", homes):
                assert getattr(importlib.import_module(home), name) is getattr(datarax, name), (
                    f"docs/api.md says {name} is in {home}")


@pytest.mark.parametrize("package", PACKAGES)
def test_dir_offers_the_package_names_not_the_helpers_its_init_imports(package):
    listed = set(dir(importlib.import_module(package)))
    assert not {"TYPE_CHECKING", "annotations", "lazy_exports"} & listed


def _packages():
    root = pathlib.Path(datarax.__file__).parent
    return sorted(
        ".".join(("datarax", *init.parent.relative_to(root).parts))
        for init in root.rglob("__init__.py")
    )


@pytest.mark.parametrize("package", _packages())
def test_every_packages_all_is_a_literal_list_of_its_exports(package):
    """Type checkers and IDEs read ``__all__`` only when it is written out as a literal
    list of strings; a lazily exporting package lists exactly the names it resolves."""
    module = importlib.import_module(package)
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    values = [node.value for node in tree.body if isinstance(node, ast.Assign)
              and any(getattr(t, "id", None) == "__all__" for t in node.targets)]
    if not values:
        return  # a package without exports (its modules are imported by path)
    assert len(values) == 1 and isinstance(values[0], ast.List), package
    assert all(isinstance(e, ast.Constant) and isinstance(e.value, str)
               for e in values[0].elts), package
    homes = getattr(module, "_HOMES", None)
    if homes is not None:
        assert set(module.__all__) == set(homes), package


def test_the_version_is_the_one_the_project_file_declares():
    import tomllib
    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert datarax.__version__ == project["project"]["version"]
