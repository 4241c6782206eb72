""""Is this field text?" is decided in one place and asked everywhere else.

The deciding home is ``datarax.host`` (:func:`~datarax.host.dtypes.is_text_dtype`,
:func:`~datarax.host.dtypes.is_text_value`, :func:`~datarax.host.dtypes.text_kind`,
:func:`~datarax.host.specs.host_field_spec`) and ``datarax.core`` (``field_spec``,
``has_text``, ``TextSpec``, ``is_host_leaf``), which re-exports it. Read from the source
text (no datarax import), a module outside ``core/`` and ``host/`` *decides text itself*
where it has one of these sites:

* **kind**: a dtype's ``.kind`` compared (``==``, ``!=``, ``in``, ``not in``) with a
  literal made only of numpy kind letters (``biufcmMOSUVT``) that names a string kind
  (``U``, ``S`` or ``T``), e.g. ``dtype.kind in "US"``; a check for numbers only
  (``kind in "iu"``) is not one, nor ``kind == "O"`` alone (an object array holds
  ragged arrays or big integers as often as text: it asks "an object array?");
* **numpy text type**: ``np.str_``, ``np.bytes_``, ``np.unicode_``, ``np.character`` or
  ``np.dtypes.StringDType`` named;
* **str-or-bytes test**: ``isinstance(x, T)`` whose types name both a ``str`` type and a
  ``bytes`` type (``str``/``np.str_`` and ``bytes``/``np.bytes_``), except where the same
  boolean expression also tests ``x`` against ``Sequence``/``Iterable``/``Mapping``: that
  asks "one string or a list of them?" of an argument, not "is this field text?".

``isinstance(x, str)`` alone is not counted (it mostly checks that an argument is a name
or a path); ``isinstance(x, bytes)`` alone neither (bytes are image payloads as often as
text). The measure of issue 42 ("is text?" sites: ≤ 5 files) is :data:`LIMIT`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "datarax"

#: the packages where text is decided
HOMES = ("core", "host")
#: at most this many modules outside HOMES may decide text themselves
LIMIT = 5

KIND_LETTERS = set("biufcmMOSUVT")
TEXT_KINDS = set("UST")  # "O" alone: "an object array?"
NUMPY_TEXT_TYPES = {"str_", "bytes_", "unicode_", "character", "StringDType"}
STR_TYPES = {"str", "str_", "unicode_"}
BYTES_TYPES = {"bytes", "bytes_"}
SHAPE_TYPES = {"Sequence", "Iterable", "Mapping"}


def _kind_literal(node: ast.expr) -> bool:
    """A literal of numpy kind letters naming a text kind (a string or a tuple of them)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_kind_literal(e) for e in node.elts)
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
        return set(node.value) <= KIND_LETTERS and bool(set(node.value) & TEXT_KINDS)
    return False


def _type_names(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Tuple):
        return set().union(*(_type_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _isinstance(node: ast.AST) -> tuple[str, set[str]] | None:
    """``(dumped subject, type names)`` of an ``isinstance(x, T)`` call (under ``not``)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance" and len(node.args) == 2):
        return ast.dump(node.args[0]), _type_names(node.args[1])
    return None


def _guards(tree: ast.AST) -> set[int]:
    """ids of the str/bytes isinstance calls that only tell one string from a list."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.BoolOp):
            continue
        tests = [(v, _isinstance(v)) for v in node.values]
        shaped = {t[0] for _, t in tests if t and t[1] & SHAPE_TYPES}
        for value, test in tests:
            if test and test[0] in shaped:
                out.add(id(value.operand if isinstance(value, ast.UnaryOp) else value))
    return out


def text_sites(path: Path) -> list[tuple[int, str]]:
    """``(line, what)`` for each place ``path`` decides "is this text?" itself."""
    tree = ast.parse(path.read_text(), str(path))
    guards = _guards(tree)
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            if (isinstance(left, ast.Attribute) and left.attr == "kind"
                    and any(_kind_literal(c) for c in node.comparators)):
                sites.append((node.lineno, "kind"))
        elif isinstance(node, ast.Attribute) and node.attr in NUMPY_TEXT_TYPES:
            if isinstance(node.value, (ast.Name, ast.Attribute)) and (
                    ast.unparse(node.value) in ("np", "numpy", "np.dtypes", "numpy.dtypes")):
                sites.append((node.lineno, f"np.{node.attr}"))
        elif id(node) not in guards:
            test = _isinstance(node) if isinstance(node, ast.Call) else None
            if test and test[1] & STR_TYPES and test[1] & BYTES_TYPES:
                sites.append((node.lineno, "isinstance str/bytes"))
    return sorted(sites)


def deciding_modules(root: Path = SRC) -> dict[str, list[tuple[int, str]]]:
    """``{module path: sites}`` for the modules outside :data:`HOMES` deciding text."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in HOMES:
            continue
        sites = text_sites(path)
        if sites:
            out[rel.as_posix()] = sites
    return out


def test_text_is_decided_in_core_and_host_and_asked_elsewhere():
    found = deciding_modules()
    shown = "\n".join(f"  {m}: " + ", ".join(f"{line} {what}" for line, what in s)
                      for m, s in found.items())
    assert len(found) <= LIMIT, (
        f"{len(found)} modules outside core/ and host/ decide 'is this field text?' "
        f"themselves (at most {LIMIT}); ask datarax.core / datarax.host instead:\n{shown}")


def test_the_scan_finds_each_kind_of_site(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "home.py").write_text('ok = a.dtype.kind in "US"\n')
    (tmp_path / "a.py").write_text('t = x.dtype.kind in "OUS"\nn = y.kind in "iu"\no = z.kind == "O"\n')
    (tmp_path / "b.py").write_text("import numpy as np\nt = isinstance(v, np.str_)\n")
    (tmp_path / "c.py").write_text("t = isinstance(v, (str, bytes))\n")
    (tmp_path / "d.py").write_text(
        "from collections.abc import Sequence\n"
        "ok = isinstance(p, Sequence) and not isinstance(p, (str, bytes))\n"
        "ok2 = isinstance(q, str)\nok3 = s.kind == 'parquet'\n")
    assert deciding_modules(tmp_path) == {
        "a.py": [(1, "kind")], "b.py": [(2, "np.str_")], "c.py": [(1, "isinstance str/bytes")]}
