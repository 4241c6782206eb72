"""The shape of ``src/datarax``, read from its source text (no datarax import).

Three rules keep the dependencies pointing one way (docs/architecture.md, "Layers"):

* no import cycle among datarax modules;
* no upward import: a module imports only its own package or a lower layer of
  :data:`LAYERS` (a package's ``__init__`` counts as the package);
* no module touches another module's ``_private`` names.

Every import counts: top-level, lazy (inside a function), ``if TYPE_CHECKING:`` and the
modules a package's lazy exports name (``_HOMES``, ``_MODULES``) alike.

And docs/architecture.md's "Layout" names every module, on its package's line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A unit is a sub-package of datarax or a top-level module; "datarax" is the
# package's own __init__. A unit may import units of lower layers only: not its own layer's
# other units, never a higher layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # the error types: importable with nothing else (no JAX)
    ("typing", "exports", "extras"),
    ("host",),  # host-side arrays, dtypes, specs, threads: no JAX (decode workers load them)
    ("core", "compilation_cache"),  # compilation_cache: JAX's cache under host's cache_home
    ("samplers", "sharding", "metrics", "storage"),  # storage: remote paths, the shard cache
    # mixing: source combinators over core's contracts (sources/__init__ re-exports them);
    # dataset: the self-describing ArrayRecord format and its writer (sources read it)
    ("mixing", "dataset"),
    ("beam", "sources"),  # beam: the dataset writer as an Apache Beam PTransform
    ("operators",),
    ("text",),
    ("dag",),  # graphs of operators, a cached prefix: over sources and operators
    ("pipeline",),
    ("checkpoint",),
    ("cli", "testing"),
    ("datarax", "__main__"),
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# Each entry names one known violation. Remove entries as they are fixed: an entry that no
# longer matches a violation fails the test, so this list only shrinks.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
KNOWN_PRIVATE: frozenset[tuple[str, str]] = frozenset()

# Module-level tables of lazy_exports (datarax.exports): their strings name the modules a
# package imports on first access, so they count as imports.
LAZY_EXPORTS = frozenset({"_HOMES", "_MODULES"})

# Underscore names that are public API of the standard library.
STDLIB_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"})


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (SRC / "datarax").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(name: str) -> list[tuple[int, str, ast.ImportFrom | ast.Import]]:
    """``(line, imported datarax module, node)`` for every import in module ``name``."""
    out = []
    for node in ast.walk(TREES[name]):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = _package(name).split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in LAZY_EXPORTS for t in node.targets
        ):  # datarax.exports.lazy_exports: names imported on first access, by string
            package = _package(name)
            for const in ast.walk(node.value):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    targets += [const.value, f"{package}.{const.value}"]
        for target in targets:
            if target in MODULES and target != name:
                out.append((node.lineno, target, node))
    return out


EDGES = {name: {target for _, target, _ in _imports(name)} for name in MODULES}


def unit(name: str) -> str:
    """The layer unit of a module: ``datarax.core.stream`` -> ``core``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "datarax"


def _where(name: str, line: int) -> str:
    return f"{MODULES[name].relative_to(SRC.parent)}:{line}"


def import_cycles() -> list[frozenset[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(EDGES[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(frozenset(group))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return groups


def upward_imports() -> list[tuple[str, str, str]]:
    """``(importer, imported, file:line)`` for each import of a unit not below the importer's."""
    out = []
    for name in sorted(MODULES):
        for line, target, _ in _imports(name):
            a, b = unit(name), unit(target)
            if a != b and RANK[b] >= RANK[a]:
                out.append((name, target, _where(name, line)))
    return out


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assigned names and attributes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.endswith("__") and attr not in STDLIB_UNDERSCORE


def _is_own(value: ast.expr) -> bool:
    """``self``, ``cls``, ``super()``, ``type(self)``."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id == "super":
            return True
        if value.func.id == "type" and len(value.args) == 1:
            return _is_own(value.args[0])
    return False


def private_reaches() -> list[tuple[str, str, str]]:
    """``(module, name, file:line)`` for each use of another module's ``_private`` name.

    Flags ``from x import _name`` (x another module), an import of a ``_private`` module
    from outside its package, and ``obj._name`` where ``obj`` is not self/cls and the
    module itself defines no ``_name`` (a practical reading of "another module's").
    """
    out = []
    for name in sorted(MODULES):
        tree = TREES[name]
        own = _defined_names(tree)
        for line, target, node in _imports(name):
            owner = target.rsplit(".", 1)[0]  # the package a private module belongs to
            inside = f"{_package(name)}.".startswith(f"{owner}.")
            if _is_private(target.rsplit(".", 1)[-1]) and not inside:
                out.append((name, target, _where(name, line)))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.startswith("datarax"):
                    for alias in node.names:
                        if _is_private(alias.name) and f"{node.module}.{alias.name}" not in MODULES:
                            out.append((name, f"{node.module}.{alias.name}", _where(name, node.lineno)))
            elif isinstance(node, ast.Attribute) and _is_private(node.attr):
                if not _is_own(node.value) and node.attr not in own:
                    out.append((name, node.attr, _where(name, node.lineno)))
    return out


def test_every_layer_unit_is_known():
    units = {unit(name) for name in MODULES}
    assert units <= set(RANK), f"add these to LAYERS: {sorted(units - set(RANK))}"


def test_no_import_cycles():
    cycles = import_cycles()
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import cycles (lazy and TYPE_CHECKING imports count): {new}"
    fixed = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not fixed, f"no longer a cycle; remove it from KNOWN_CYCLES: {fixed}"


def test_no_upward_imports():
    found = upward_imports()
    new = [f"{where}: {a} imports {b}" for a, b, where in found if (a, unit(b)) not in KNOWN_UPWARD
           and (a, b) not in KNOWN_UPWARD]
    assert not new, "imports pointing up the layers:\n" + "\n".join(new)
    seen = {(a, b) for a, b, _ in found} | {(a, unit(b)) for a, b, _ in found}
    seen |= {(a, f"datarax.{unit(b)}") for a, b, _ in found}
    fixed = sorted(KNOWN_UPWARD - seen)
    assert not fixed, f"no longer imported; remove from KNOWN_UPWARD: {fixed}"


def test_no_reach_into_another_modules_private_names():
    found = private_reaches()
    new = [f"{where}: {name} uses {what}" for name, what, where in found
           if (name, what) not in KNOWN_PRIVATE]
    assert not new, "private names of another module:\n" + "\n".join(new)
    fixed = sorted(KNOWN_PRIVATE - {(name, what) for name, what, _ in found})
    assert not fixed, f"no longer used; remove from KNOWN_PRIVATE: {fixed}"


# ------------------------------------------------------------ the checks themselves
SAMPLE = {
    "datarax/__init__.py": "",
    "datarax/core/__init__.py": "",
    "datarax/core/a.py": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from datarax.core.b import B\n"  # a type-only import counts
    ),
    "datarax/core/b.py": "def f():\n    from datarax.core import a\n",  # a lazy one too
    "datarax/core/c.py": "_HOMES = {'Top': 'datarax.pipeline.top'}\n",  # lazy export: upward
    "datarax/core/low.py": (
        "def g(p):\n    from datarax.pipeline.top import T\n"  # upward
        "    return p._stats, T._adopt(p)\n"  # another module's private names
    ),
    "datarax/core/_hidden.py": "",
    "datarax/pipeline/__init__.py": "",
    "datarax/pipeline/top.py": (
        "from datarax.core import _hidden\nfrom datarax.core.b import _helper\n"
        "class T:\n    def _own(self, other):\n        return self._x, other._own\n"
    ),
}


def test_the_checks_find_cycles_upward_imports_and_private_reaches(tmp_path, monkeypatch):
    import sys

    for name, text in SAMPLE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "SRC", tmp_path)
    monkeypatch.setattr(module, "MODULES", _modules())
    monkeypatch.setattr(module, "TREES", {n: ast.parse(p.read_text()) for n, p in MODULES.items()})
    monkeypatch.setattr(module, "EDGES", {n: {t for _, t, _ in _imports(n)} for n in MODULES})
    assert import_cycles() == [frozenset({"datarax.core.a", "datarax.core.b"})]
    assert [(a, b) for a, b, _ in upward_imports()] == [
        ("datarax.core.c", "datarax.pipeline.top"), ("datarax.core.low", "datarax.pipeline.top"),
    ]
    assert sorted((a, b) for a, b, _ in private_reaches()) == [
        ("datarax.core.low", "_adopt"), ("datarax.core.low", "_stats"),
        ("datarax.pipeline.top", "datarax.core._hidden"),
        ("datarax.pipeline.top", "datarax.core.b._helper"),
    ]


def test_no_module_is_over_500_lines():
    """One idea per module: a module past 500 lines holds two (split it where they part)."""
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


# ------------------------------------------------------------ the page names every module
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"


def layout_lines(page: str) -> dict[str, str]:
    """The "Layout" block of docs/architecture.md by entry: ``"core/"`` or ``"metrics.py"``
    (a line indented two spaces starts one) -> its text, continuation lines included."""
    block = page.split("\n## Layout\n", 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    entry = None
    for line in block.splitlines():
        if re.match(r"  \S", line):
            entry = line.split()[0]
            entries[entry] = line
        elif entry is not None:
            entries[entry] += "\n" + line
    return entries


def unnamed_modules(page: str) -> list[str]:
    """Modules of ``src/datarax`` (``__init__.py`` aside) the Layout does not name: a
    top-level ``x.py`` needs an entry of its own, ``pkg/.../x.py`` the word ``x`` (or
    ``x.py``) on ``pkg/``'s entry."""
    entries = layout_lines(page)
    missing = []
    for path in sorted((SRC / "datarax").rglob("*.py")):
        rel = path.relative_to(SRC / "datarax").as_posix()
        if path.name == "__init__.py":
            continue
        if "/" not in rel:
            named = rel in entries
        else:
            text = entries.get(rel.split("/")[0] + "/", "")
            named = re.search(rf"(?<![\w.]){re.escape(path.stem)}(?![\w])", text) is not None
        if not named:
            missing.append(rel)
    return missing


def test_the_layout_names_every_module():
    missing = unnamed_modules(ARCHITECTURE.read_text())
    assert not missing, (
        "docs/architecture.md's Layout does not name these modules: "
        f"{missing}. Add each on its package's entry (`  core/  ...`; a top-level module "
        "gets a line of its own): its name and, in a few words, what it is.")


def test_the_layout_check_finds_unnamed_modules(tmp_path, monkeypatch):
    import sys

    for name in ("datarax/__init__.py", "datarax/metrics.py", "datarax/typing.py",
                 "datarax/core/__init__.py", "datarax/core/spec.py", "datarax/core/keys.py",
                 "datarax/core/spec_tools.py", "datarax/sources/hf/arrow.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    page = ("# The page\n\n## Layout\n\n```\nsrc/datarax/\n  core/        spec (the checks),\n"
            "               keys.py\n  sources/     hf/arrow (Arrow columns)\n"
            "  metrics.py   StatsLogger\n```\n\ntyping.py is named here, outside the block.\n")
    assert unnamed_modules(page) == ["core/spec_tools.py", "typing.py"]
