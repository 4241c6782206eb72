"""Every script in examples/ runs as is: ``python examples/...py`` from an empty folder,
no network, exit status 0 and the lines it promises to print.

One table, :data:`EXAMPLES`, holds every script (a test checks that none is missing):
the lines its output must contain, the environment that keeps it small, and whether
it is slow or run by another test that asserts more (both ``-m slow`` only, each in its
own interpreter; the default run's scripts share one fresh interpreter). Tests that
check what an example computed in detail live beside the feature
(tests/test_seed_examples.py runs the guide's data-source examples in process and
asserts their values).
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import os
import re
import runpy
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Example:
    """How to run one example script and what it must print."""

    lines: tuple[str, ...] = ()  # whole lines its stdout must contain, in this order
    env: dict[str, str] = field(default_factory=dict)  # keeps the run small
    slow: bool = False
    needs: str | None = None  # an optional package it imports
    # a test that runs this very script and asserts more (the default run skips it here)
    covered_by: str | None = None


SEEDS = "tests/test_seed_examples.py (in process, asserting the values)"

EXAMPLES: dict[str, Example] = {
    # The guide's data-source examples print little; test_seed_examples.py asserts values.
    "data_sources/memory_source.py": Example(("Batch shape: (10, 28, 28)",) * 3, covered_by=SEEDS),
    "data_sources/pipeline_with_operator.py": Example(("batch sizes: [32, 32, 32, 4]",), covered_by=SEEDS),
    "data_sources/metadata.py": Example(
        ("last element: RecordMetadata(index=9, epoch=0, source='MemorySource')",), covered_by=SEEDS
    ),
    "data_sources/state_management.py": Example(
        ("after 10 elements: {'current_index': 10, 'current_epoch': 0}",), covered_by=SEEDS
    ),
    "data_sources/custom_csv_source.py": Example(
        ("element spec: {'features': ((3,), 'float32')}", "batch shapes: [(4, 3), (4, 3), (2, 3)]"),
        covered_by=SEEDS,
    ),
    "data_sources/array_record_source.py": Example(
        ("batch 0: features (32, 3)", "batch 3: features (4, 3)"), needs="array_record",
        covered_by=SEEDS,
    ),
    "data_sources/npy_source.py": Example(
        ("records: 512 batches per epoch: 8",
         "element spec: {'features': ((8,), 'float32'), 'label': ((), 'int32')}",
         "resumed at batch 3 of 8; identical batches: True"),
        env={"NUM_RECORDS": "512"}, slow=True,
    ),
    "checkpoint/orbax_manager.py": Example(
        ("resumed run matches the uninterrupted run: True",), needs="orbax", slow=True,
    ),
    "integration/arrayrecord/01_arrayrecord_quickref.py": Example(
        ("Quick reference completed!",), needs="array_record",
        covered_by="tests/sources/test_array_record_seed.py (its whole output, as a script)",
    ),
    "sources/tfds_mnist.py": Example(
        ("Batch 0: (32, 28, 28, 1)", "Batch 2: (32, 28, 28, 1)"), needs="tensorflow_datasets",
        slow=True,  # a TensorFlow import; TFDS sources: tests/sources/test_tfds.py
    ),
    "sources/hf_streaming_sst2.py": Example(
        ("Batch 0: ['local sentence number 0', 'local sentence number 1']...",), needs="datasets",
        slow=True,
    ),
    "sources/hf_local_resume.py": Example(
        ("eager: 800 {'label': ((), 'int32'), 'features': ((8,), 'float32')}",
         "HFEagerSource HFStreamingSource"),
        slow=True, needs="datasets",
    ),
    "vision/image_classification.py": Example(
        ("batch: {'image': ((64, 32, 32, 3), 'float32'), 'label': ((64, 3), 'float32')}",
         "soft labels sum to 1: True", "resumed batches identical: True"),
        needs="dm_pix", slow=True,
    ),
    "filtering/filter_and_padded_eval.py": Example(
        ("trained on digits 0-4: kept 1416, dropped 1458 (2 epochs)",
         "resumed batches identical: True", "eval batch shapes: [(32, 8, 8, 1)]",
         "evaluated 193 records of 193, eval compiles: 1", "accuracy above 0.9: True"),
        needs="sklearn",
    ),
    "convert_and_train.py": Example(
        ("converted: 1437 records in 4 shards; image (8, 8, 1) png; classes zero..nine",
         "resumed batches identical: True", "test accuracy above 0.8: True"),
        slow=True, needs="datasets",
    ),
    "sliding_windows.py": Example(
        ("documents: 64 windows in epoch 0: 325 batches: 41",
         "batch: inputs (8, 16) targets shifted by one: True",
         "resumed batches identical: True"),
        slow=True,
    ),
    "graphs/contrastive_views.py": Example(
        ("fields: ['target_label', 'view1_image', 'view2_image'] (16, 8, 8)",
         "views identical at batch size 16 and 8: True", "views identical after a resume: True"),
    ),
    "graphs/mixture_resume.py": Example(
        ("realised shares web/books/captions: [0.5, 0.3, 0.2]",
         "saved at record 350 source position: {'current_index': 350, 'current_epoch': 0, "
         "'stream_passes': {'captions': [0, 0]}}",
         "restore refuses other mixture settings, e.g. weights [5, 3, 2]",
         "resumed run matches the uninterrupted run: True"),
    ),
    "text/lm_pretraining.py": Example(
        ("crash at step 8 (loss 2.980)", "resumed at step 6: 48 rows into pass 0",
         "resumed run matches the uninterrupted run: True"),
        slow=True, needs="tokenizers",
    ),
}


def test_every_example_script_is_in_the_table():
    scripts = {p.relative_to(ROOT / "examples").as_posix() for p in (ROOT / "examples").rglob("*.py")}
    assert scripts - set(EXAMPLES) == set(), "add these scripts to EXAMPLES"
    assert set(EXAMPLES) - scripts == set(), "EXAMPLES names scripts that are gone"


def _slow_params():
    """The scripts the default run leaves out (test_default_examples_run_as_is runs the rest)."""
    for name, example in EXAMPLES.items():
        if example.slow or example.covered_by:
            yield pytest.param(name, example, marks=[pytest.mark.slow], id=name)


def _env(example: Example, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",  # no example may need the network
        "HF_DATASETS_CACHE": str(tmp_path / "hf_cache"),
        "TFDS_DATA_DIR": str(tmp_path / "tfds"),
        "MPLBACKEND": "Agg",
        **example.env,
    }


def _assert_printed(name: str, example: Example, returncode: int, stdout: str, stderr: str) -> None:
    assert returncode == 0, f"{name} failed:\n{stderr[-3000:]}"
    printed = stdout.splitlines()
    at = 0
    for line in example.lines:
        assert line in printed[at:], (
            f"{name} did not print {line!r} (after line {at}):\n{stdout[-3000:]}")
        at = printed.index(line, at) + 1


# The default run's scripts (neither slow nor covered_by) run one after the other in ONE
# fresh interpreter (one start-up, one import of jax, flax and datarax for all, not one
# each): each as `python script` runs it, as __main__, its own folder first on sys.path,
# an empty folder (<out>/cwd) as its working directory, its stdout, stderr and exit status
# to files in <out>. Only the imported modules are shared.
_RUN_EACH = """
import contextlib, os, runpy, sys, traceback
for script, folder in zip(sys.argv[1::2], sys.argv[2::2]):
    os.mkdir(os.path.join(folder, "cwd"))
    os.chdir(os.path.join(folder, "cwd"))
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    with open(os.path.join(folder, "stdout"), "w") as out, \\
            open(os.path.join(folder, "stderr"), "w") as err, \\
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            code = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
            if not isinstance(exit_.code, int | None):
                print(exit_.code, file=err)
        except BaseException:
            traceback.print_exc(file=err)
            code = 1
    sys.path.remove(os.path.dirname(script))
    with open(os.path.join(folder, "returncode"), "w") as f:
        f.write(str(code))
"""


def test_default_examples_run_as_is(tmp_path):
    """One test, not one per script: under pytest-xdist each worker would start its own
    interpreter for the scripts it drew. A script whose optional package is missing is
    left out (the slow run's test skips it the same way)."""
    folders = {
        name: tmp_path / name.replace("/", "_").removesuffix(".py")
        for name, example in EXAMPLES.items()
        if not example.slow and not example.covered_by
        and (example.needs is None or importlib.util.find_spec(example.needs) is not None)
    }
    assert len(folders) >= 2, "the default run runs the examples that need no optional package"
    assert all(not EXAMPLES[name].env for name in folders), "a script with its own env: own run"
    for folder in folders.values():
        folder.mkdir()
    args = [str(a) for name, folder in folders.items() for a in (ROOT / "examples" / name, folder)]
    done = subprocess.run([sys.executable, "-c", _RUN_EACH, *args],
                          env=_env(Example(), tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, folder in folders.items():
        stdout, stderr = (folder / "stdout").read_text(), (folder / "stderr").read_text()
        returncode = int((folder / "returncode").read_text())
        _assert_printed(name, EXAMPLES[name], returncode, stdout, stderr)


@pytest.mark.parametrize("name, example", _slow_params())
def test_slow_example_runs_as_is(name, example, tmp_path):
    if example.needs is not None:
        pytest.importorskip(example.needs)
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        cwd=tmp_path, env=_env(example, tmp_path), capture_output=True, text=True, timeout=600,
    )
    _assert_printed(name, example, out.returncode, out.stdout, out.stderr)


# Packages every install has (pyproject's dependencies, and optax and orbax, which flax
# requires); any other import in an example is optional and must fail with the
# `pip install "datarax[...]"` that adds it.
CORE = {"numpy", "jax", "flax", "grain", "datarax", "optax", "orbax"}


def _unguarded_optional_imports(tree: ast.AST) -> list[str]:
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in {"ModuleNotFoundError", "ImportError"}
            for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in CORE and top not in sys.stdlib_module_names and id(node) not in guarded:
                found.append(f"line {node.lineno}: {name}")
    return found


def test_every_optional_import_of_an_example_names_its_extra():
    unguarded = {
        path.relative_to(ROOT / "examples").as_posix(): found
        for path in sorted((ROOT / "examples").rglob("*.py"))
        if (found := _unguarded_optional_imports(ast.parse(path.read_text())))
    }
    assert unguarded == {}, "wrap these imports: try/except ModuleNotFoundError -> SystemExit naming the extra"


class _Missing(importlib.abc.MetaPathFinder):
    """Makes ``array_record`` look uninstalled."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "array_record":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_an_example_without_its_optional_package_says_which_extra(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m.split(".")[0] == "array_record"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Missing(), *sys.meta_path])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "examples" / "data_sources" / "array_record_source.py"),
                       run_name="__main__")
    assert str(exit_.value.code) == (
        "No module named 'array_record'; this example needs: pip install \"datarax[arrayrecord]\""
    )
    assert list(tmp_path.iterdir()) == []  # it stopped before writing anything


def test_npy_example_refuses_a_size_too_small_for_its_resume(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NUM_RECORDS", "10")
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "examples" / "data_sources" / "npy_source.py"), run_name="__main__")
    assert str(exit_.value.code) == (
        "NUM_RECORDS=10 is too small: this example needs at least 256 records (4 batches of 64)"
    )


def test_the_examples_readme_lists_every_script():
    listed = set(re.findall(r"\]\(([^)]+\.py)\)", (ROOT / "examples" / "README.md").read_text()))
    assert listed == set(EXAMPLES)
