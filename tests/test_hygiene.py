"""datarax is a guest in its user's process.

* ``import datarax`` and running a pipeline change nothing global: JAX's options, the
  user's cache directories, thread priorities and ``atexit`` hooks stay as they were;
  the one folder written is datarax's own store of compiled steps (0700).
* ``src/`` uses no private API of its dependencies (``jax._src``, an underscore
  attribute of a JAX, Flax, Grain or array_record object).
* A stage reading a value while tracing (through a module in a default argument) sees
  the value of its own process: nothing compiled by an earlier process is reused
  unless JAX's own persistent cache, keyed by the lowered program, finds it equal.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

from forked_runs import ForkedRuns

SRC = Path(__file__).resolve().parents[1] / "src"


def _run(code: str, env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    """Run ``code`` in a fresh interpreter (no compilation cache of the caller's) and
    return what it printed."""
    environ = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env={**environ, **env}, cwd=cwd,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# ------------------------------------------------------------------ global state
GLOBALS = """
    import atexit, json, multiprocessing.util, os, sys, weakref
    import jax, numpy as np
    from flax import nnx
    # What the standard library and JAX register once, on first use, comes first:
    # multiprocessing's exit function (on import) and weakref.finalize's (JAX's tracing).
    weakref.finalize(nnx.Rngs(0), print)
    jax.numpy.zeros(1).block_until_ready()

    def tree(root):
        return sorted(str(p.relative_to(root)) for p in __import__("pathlib").Path(root).rglob("*"))

    def priorities():
        if not sys.platform.startswith("linux"):
            return {}
        task = f"/proc/{os.getpid()}/task"
        found = set()
        for t in os.listdir(task):
            try:
                found.add(os.getpriority(os.PRIO_PROCESS, int(t)))
            except ProcessLookupError:  # a thread that ended since the listing
                pass
        return sorted(found)

    def snapshot():
        return {"config": {k: repr(v) for k, v in sorted(jax.config.values.items())},
                "home": tree(os.environ["HOME"]), "atexit": atexit._ncallbacks(),
                "process_priority": os.getpriority(os.PRIO_PROCESS, 0)}

    before = snapshot()
    import datarax
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                          {"x": np.arange(40, dtype=np.float32)})
    batches = [np.asarray(b["x"]).tolist() for b in
               Pipeline(source=source, batch_size=8, prefetch=2, rngs=nnx.Rngs(0))]
    after = snapshot()
    # then, asked for: JAX's persistent cache in the default folder (~/.cache/datarax/jax)
    os.environ["XDG_CACHE_HOME"] = "relative/cache"  # relative: ignored, as XDG says
    cache = [str(datarax.enable_compilation_cache()), jax.config.jax_compilation_cache_dir]
    print(json.dumps({"before": before, "after": after, "priorities": priorities(),
                      "records": sorted(x for b in batches for x in b), "cache": cache}))
"""


def test_import_and_one_epoch_change_nothing_global(tmp_path):
    """... until datarax.enable_compilation_cache() is called: it creates its folder
    (~/.cache/datarax/jax by default) then, and only then (one process checks both)."""
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "JAX_PLATFORMS": "cpu",
           "DATARAX_COMPILE_CACHE_DIR": ""}  # the default folder, not the test run's
    out = json.loads(_run(GLOBALS, env).strip().splitlines()[-1])
    assert out["records"] == list(range(40))  # the epoch ran
    before, after = out["before"], out["after"]
    changed = {k: (v, after["config"].get(k)) for k, v in before["config"].items()
               if after["config"].get(k) != v}
    assert changed == {}, f"jax.config options changed: {changed}"
    # the one folder written: datarax's own store of compiled steps, private to the user
    store = os.path.join(".cache", "datarax", "compiled")
    written = sorted(set(after["home"]) - set(before["home"]))
    assert [p for p in written if not p.startswith(store)] == [".cache/datarax"]
    assert any(p.startswith(store + os.sep) and p.endswith(".exe") for p in written)
    assert oct((home / store).stat().st_mode & 0o777) == "0o700"
    assert set(before["home"]) <= set(after["home"]), "files removed under $HOME"
    assert after["atexit"] == before["atexit"], "atexit hooks added"
    assert after["process_priority"] == before["process_priority"]
    if sys.platform.startswith("linux"):  # every thread of the process at its priority
        assert out["priorities"] == [before["process_priority"]]
    default = home / ".cache" / "datarax" / "jax"  # not written before the call (above)
    assert after["config"]["jax_compilation_cache_dir"] == "None"
    assert out["cache"] == [str(default), str(default)] and default.is_dir()


# --------------------------------------------------------------- private APIs
DEPENDENCIES = {"jax", "jaxlib", "flax", "grain", "array_record"}

def _defined_here(tree: ast.AST) -> set[str]:
    """Underscore names a module defines itself (its functions, classes, attributes it
    assigns): reading them on another object of the same module's classes is that
    module's own business (``other._signature`` in ``__eq__``), not a dependency's."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if _private(n)}


# Underscore names the standard library documents as public API.
STDLIB_PUBLIC = {"os._exit", "sys._getframe"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _reaches(path: Path) -> list[str]:
    """Private imports of dependencies and underscore attributes, of objects other than
    ``self``/``cls``, that the file does not define itself, as ``line: code``."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    own = _defined_here(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [f"{node.module or ''}.{a.name}" for a in node.names])
            for module in modules:
                parts = module.split(".")
                if parts[0] in DEPENDENCIES and any(_private(p) for p in parts[1:]):
                    found.append(f"{node.lineno}: import {module}")
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and ast.unparse(node) not in STDLIB_PUBLIC:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                             "__import__")):
            parts = node.args[0].value.split(".")
            if parts[0] in DEPENDENCIES and any(_private(p) for p in parts[1:]):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)
              and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_src_uses_no_private_api_of_its_dependencies():
    package = SRC / "datarax"
    bad = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        hits = _reaches(path)
        if hits:
            bad[where] = hits
    assert bad == {}, (
        "private names reached from outside their object (use the public API, or for "
        f"datarax's own objects a public method): {json.dumps(bad, indent=1)}"
    )


def test_the_scan_finds_private_reaches(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from jax._src import config\nimport flax.nnx._internal\n"
        "def f(v, self=None):\n"
        "    self._ok = v._raw_value\n    return getattr(v, '_cache_size', None), v.__dict__, os._exit\n"
        "importlib.import_module('jax._src.mesh')\nimportlib.import_module('jax.numpy')\n"
    )
    assert sorted(_reaches(sample), key=lambda hit: int(hit.split(":")[0])) == [
        "1: import jax._src.config", "2: import flax.nnx._internal",
        "4: v._raw_value", "5: getattr(v, '_cache_size', None)",
        "6: importlib.import_module('jax._src.mesh')",
    ]


# ---------------------------------------------------------- stale programs (item 1)
STAGE = """
    import json, sys
    import jax
    import numpy as np
    import datarax
    from flax import nnx
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig
    import cfgmod

    assert jax.config.jax_compilation_cache_dir is None
    path = datarax.enable_compilation_cache(sys.argv[1])  # a folder given: made and used
    print(json.dumps([str(path), jax.config.jax_compilation_cache_dir]))

    def fn(el, key=None, cfg=cfgmod):
        return el.update_data({"x": el.data["x"] * cfg.SCALE})

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(8, dtype=np.int32)})
    pipeline = Pipeline(source=source, batch_size=4, rngs=nnx.Rngs(0),
                        stages=[ElementOperator(ElementOperatorConfig(), fn=fn)])
    print([np.asarray(batch["x"]).tolist() for batch in pipeline])
"""


# Each run of STAGE is a new process: a fork of one that imported jax, flax and datarax and
# did nothing else (no backend, no compile, no cache on, cfgmod not imported), so the three
# runs pay one interpreter start-up and import, not three.
STAGE_IMPORTS = """
import sys
import jax, numpy
from flax import nnx
from datarax.operators import ElementOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource
sys.dont_write_bytecode = True  # cfgmod is edited within a second: never a stale .pyc
"""


def _stage_run(runs: ForkedRuns, folder: Path, cache: Path, name: str) -> list[list[int]]:
    out, err = folder / f"{name}.out", folder / f"{name}.err"
    code = runs.wait(runs.start(folder / "stage.py", [str(cache)], out, err))
    assert code == 0, f"{name} ended with {code}: {err.read_text()[-3000:]}"
    lines = out.read_text().strip().splitlines()
    assert json.loads(lines[-2]) == [str(cache), str(cache)]  # enable_compilation_cache(cache)
    return json.loads(lines[-1])


def test_a_value_read_while_tracing_is_the_new_process_own(tmp_path):
    cache = tmp_path / "jax-cache"
    (tmp_path / "stage.py").write_text(textwrap.dedent(STAGE))
    (tmp_path / "cfgmod.py").write_text("SCALE = 2\n")
    environ = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    environ.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(SRC)]), JAX_PLATFORMS="cpu")
    with ForkedRuns(STAGE_IMPORTS, tmp_path, environ) as runs:
        assert _stage_run(runs, tmp_path, cache, "first") == [[0, 2, 4, 6], [8, 10, 12, 14]]
        assert cache.is_dir() and any(cache.iterdir())  # the persistent cache was on and stored
        (tmp_path / "cfgmod.py").write_text("SCALE = 3\n")
        assert _stage_run(runs, tmp_path, cache, "edited") == [[0, 3, 6, 9], [12, 15, 18, 21]]
        (tmp_path / "cfgmod.py").write_text("SCALE = 2\n")  # back: JAX's cache may serve it
        assert _stage_run(runs, tmp_path, cache, "back") == [[0, 2, 4, 6], [8, 10, 12, 14]]


# enable_compilation_cache() creates its folder only when called: the default folder in
# test_import_and_one_epoch_change_nothing_global's process, a given one in each _stage_run's.


# ------------------------------------------------------ words of the project's history
HISTORY = re.compile(r"\bseeds?'?\s+0\d\d\b|\bW\d{1,2}\b|\bissue\s*#?\s*\d+|\bround \d+\b", re.I)


def _history_words(text: str) -> list[str]:
    """``line: words`` of project-history words in the comments and strings of ``text``."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            for match in HISTORY.finditer(token.string):
                line = token.start[0] + token.string[: match.start()].count("\n")
                found.append(f"{line}: {' '.join(match.group().split())}")
    return found


def test_library_text_has_no_words_of_the_project_history():
    bad = {}
    for path in sorted((SRC / "datarax").rglob("*.py")):
        hits = _history_words(path.read_text())
        if hits:
            bad[path.relative_to(SRC).as_posix()] = hits
    assert bad == {}, f"say what the code does, not which issue or benchmark asked: {bad}"


def test_the_history_scan_finds_its_words():
    text = '"""As seed\n    002 does."""\nx = 1  # W7: faster\nprint("see issue #26")\nW = 2\n'
    assert _history_words(text) == ["1: seed 002", "3: W7", "4: issue #26"]


# ------------------------------------------------------------ a lean core install
def _core_dependencies() -> set[str]:
    """The import names of ``[project] dependencies`` in pyproject.toml."""
    import tomllib

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower() for spec in project["dependencies"]}
    return {name.replace("-", "_") for name in names}


def _imported_top_level_modules() -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_core_dependency_is_imported_by_src():
    """The core install holds nothing ``src/`` does not import (peers such as Grain
    belong to the ``dev`` and ``bench`` extras)."""
    unused = _core_dependencies() - _imported_top_level_modules()
    assert unused == set(), f"core dependencies that src/ never imports: {sorted(unused)}"
    assert "grain" not in _core_dependencies()
