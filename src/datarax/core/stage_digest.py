"""The ``stages`` digest of a saved state: what it sees of the stages, and what it cannot.

A state is refused when the stages that would resume it differ from those that saved
it. The digest (:func:`stages_fingerprint`) covers, for each stage in order, its class,
name and config; its functions' source tokens (comments and spacing aside; a lambda's
own expression) with their plain-data closure and default values (numbers, strings,
containers, dataclasses, enums, arrays by bytes); and its nested stages. Module globals
and other objects count by name or type only. The digest is the same in every process
and Python version, except for functions without findable source (seen by bytecode).

Example:
    >>> from datarax.operators import FilterOperator
    >>> even = FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)
    >>> third = FilterOperator(predicate=lambda el: el.data["x"] % 3 == 0)
    >>> stages_fingerprint([even]) == stages_fingerprint([third])
    False
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import hashlib
import inspect
import io
import linecache
import os
import re
import sys
import textwrap
import tokenize
import types
from typing import Any

import jax
import numpy as np
from flax import nnx

from datarax.core.operator import OperatorModule

SEES = (
    "a digest of the stages, in order: their classes, names and configs, their functions' "
    "source (comments and spacing aside) and the closure and default values that "
    "are plain data (numbers, strings, "
    "arrays, containers of these), and the stages nested in them; the values of module "
    "globals a function reads and other objects it holds count by name or type only"
)
# a walk that only reads the functions' source (remember_sources): arrays not hashed
_SOURCES_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("sources", default=False)
_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))
_DEPTH = 24  # deeper values are seen as "..." (a digest, not a serializer)


def digest(material: str | bytes) -> str:
    """First 12 hex digits of the SHA-256 of ``material``."""
    raw = material.encode() if isinstance(material, str) else material
    return hashlib.sha256(raw).hexdigest()[:12]


def stages_fingerprint(stages: Any) -> str:
    """Digest of ``stages`` as a state records it (see the module docstring)."""
    seen: set[int] = set()
    return digest("\n".join(_stage(stage, seen, 0) for stage in stages))


def remember_sources(stages: Any) -> None:
    """Read the source of every function of ``stages`` now, while the files hold the
    imported code, so later edits to them do not change this process's states.

    Example:
        >>> from datarax.operators import FilterOperator
        >>> remember_sources([FilterOperator(predicate=lambda el: el.data["x"] > 0)])
    """
    reset = _SOURCES_ONLY.set(True)
    try:
        seen: set[int] = set()
        for stage in stages:
            _stage(stage, seen, 0)
    finally:
        _SOURCES_ONLY.reset(reset)


def describe(value: Any) -> str:
    """What the digest sees of ``value``, as text that is the same in every process.

    Example:
        >>> describe((1, "a", None))
        "tuple(1,'a',None)"
    """
    return _describe(value, set(), 0)


# ----------------------------------------------------------------- the stages
def _stage(stage: Any, seen: set[int], depth: int) -> str:
    if not isinstance(stage, OperatorModule):
        return f"callable|{_describe(stage, seen, depth)}"
    if id(stage) in seen:
        return "stage(again)"
    seen.add(id(stage))
    cls = type(stage)
    parts = [f"{_name_of(cls)}|{stage.name!r}|{_describe(stage.config.to_dict(), seen, depth)}"]
    for klass in cls.__mro__:  # operator classes written outside datarax: their code
        if issubclass(klass, OperatorModule) and not klass.__module__.startswith("datarax."):
            methods = ((name, _function_of(item)) for name, item in sorted(vars(klass).items()))
            parts += [f"method {name}:{_function(fn, seen, depth + 1)}"
                      for name, fn in methods if fn is not None]
    for name, value in sorted(vars(stage).items()):
        if name.startswith("_") or name in ("config", "name"):
            continue
        part = _attribute(value, seen, depth + 1)
        if part is not None:
            parts.append(f"{name}={part}")
    seen.discard(id(stage))
    return "|".join(parts)


def _attribute(value: Any, seen: set[int], depth: int) -> str | None:
    """What the digest sees of a stage's attribute: its functions and nested stages."""
    if depth > _DEPTH or isinstance(value, (nnx.Variable, type)):
        return None
    if isinstance(value, OperatorModule):
        return f"[{_stage(value, seen, depth)}]"
    if isinstance(value, (nnx.Dict, dict)):
        items = [(key, _attribute(item, seen, depth + 1)) for key, item in value.items()]
        return None if all(p is None for _, p in items) else "{" + ",".join(
            f"{key!r}:{p}" for key, p in items) + "}"
    if isinstance(value, (nnx.List, list, tuple)):
        parts = [_attribute(item, seen, depth + 1) for item in value]
        return None if all(p is None for p in parts) else "(" + ",".join(map(str, parts)) + ")"
    if callable(value):
        return _describe(value, seen, depth)
    return None


# ------------------------------------------------------------- any value seen
def _describe(value: Any, seen: set[int], depth: int) -> str:
    if depth > _DEPTH:
        return "..."
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{_name_of(type(value))}.{value.name}"
    if isinstance(value, (np.ndarray, np.generic)) or _is_jax_array(value):
        return _array(value)
    if isinstance(value, types.CodeType):
        return _code(value, seen, depth)
    if isinstance(value, OperatorModule):
        return f"stage[{_stage(value, seen, depth + 1)}]"
    if isinstance(value, type):
        return f"class({_name_of(value)})"
    if isinstance(value, types.ModuleType):
        return f"module({value.__name__})"
    if id(value) in seen:  # a function reaching itself through its closure, a cycle
        return "again"
    seen.add(id(value))
    try:
        return _compound(value, seen, depth + 1)
    finally:
        seen.discard(id(value))


def _compound(value: Any, seen: set[int], depth: int) -> str:
    if isinstance(value, (tuple, list)):
        inner = ",".join(_describe(v, seen, depth) for v in value)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        items = sorted(f"{_describe(k, seen, depth)}:{_describe(v, seen, depth)}"
                       for k, v in value.items())
        return f"dict({','.join(items)})"
    if isinstance(value, (set, frozenset)):  # their order follows salted hashes: sorted
        return f"set({','.join(sorted(_describe(v, seen, depth) for v in value))})"
    if isinstance(value, types.FunctionType):
        return _function(value, seen, depth)
    if isinstance(value, functools.partial):
        return (f"partial({_describe(value.func, seen, depth)};"
                f"{_describe(value.args, seen, depth)};{_describe(value.keywords, seen, depth)})")
    if isinstance(value, types.MethodType):
        return (f"method({_describe(value.__func__, seen, depth)};"
                f"of {_name_of(type(value.__self__))})")
    if isinstance(value, (types.BuiltinFunctionType, np.ufunc)):
        return f"builtin({getattr(value, '__module__', None)}.{value.__name__})"
    if dataclasses.is_dataclass(value):
        fields = ",".join(f"{f.name}={_describe(getattr(value, f.name), seen, depth)}"
                          for f in dataclasses.fields(value))
        return f"{_name_of(type(value))}({fields})"
    try:  # jax.jit(f), functools.wraps; a proxy may raise anything on a missing name
        wrapped = getattr(value, "__wrapped__", None)
    except Exception:  # noqa: BLE001
        wrapped = None
    if isinstance(wrapped, types.FunctionType):
        return f"{_name_of(type(value))}({_function(wrapped, seen, depth)})"
    call = getattr(type(value), "__call__", None)
    if isinstance(call, types.FunctionType):  # a callable object: its class's code only
        return f"object({_name_of(type(value))};{_function(call, seen, depth)})"
    return f"object({_name_of(type(value))})"


def _function(fn: types.FunctionType, seen: set[int], depth: int) -> str:
    code = fn.__code__
    cells = fn.__closure__ or ()
    closure = ",".join(f"{name}={_cell(cell, seen, depth)}"
                       for name, cell in zip(code.co_freevars, cells, strict=False))
    return (f"function({fn.__module__}.{fn.__qualname__};{_code(code, seen, depth)};"
            f"defaults={_describe(fn.__defaults__, seen, depth)};"
            f"kwdefaults={_describe(fn.__kwdefaults__, seen, depth)};closure({closure}))")


def _cell(cell: types.CellType, seen: set[int], depth: int) -> str:
    try:
        contents = cell.cell_contents
    except ValueError:  # not assigned yet
        return "<empty>"
    return _describe(contents, seen, depth)


def _code(code: types.CodeType, seen: set[int], depth: int) -> str:
    source = _source(code.co_filename, code)
    if source is not None:  # what it says, not what this Python compiles it to
        return f"source({hashlib.sha256(source.encode()).hexdigest()})"
    consts = ",".join(_describe(c, seen, depth + 1) for c in code.co_consts)
    return f"code({hashlib.sha256(code.co_code).hexdigest()};({consts});{code.co_names!r})"


@functools.lru_cache(maxsize=1024)
def _source(filename: str, code: types.CodeType) -> str | None:
    """The tokens of ``code``'s source (a lambda's: its expression), or None. Cached: the
    text read first stands for the code once its file is edited (``filename``: code
    objects compare equal across files)."""
    lines = _lines(code)
    if not lines:
        return None
    if code.co_name != "<lambda>":
        first = code.co_firstlineno - 1
        if first >= len(lines):  # a file shorter than it was
            return None
        while first > 0 and not _BLOCK_START.match(lines[first]):  # as findsource finds it
            first -= 1
        try:
            return _tokens("".join(inspect.getblock(lines[first:])))
        except (IndentationError, SyntaxError, tokenize.TokenError):
            return None
    # a lambda: the span of its instructions (its expression; other code on its lines aside)
    spans = [p for p in code.co_positions()
             if None not in p and (p[0], p[2]) != (p[1], p[3])]
    if not spans:
        return None
    start = min((p[0], p[2]) for p in spans)
    end = max((p[1], p[3]) for p in spans)
    raw = [line.encode() for line in lines[start[0] - 1:end[0]]]  # offsets count UTF-8 bytes
    if not raw:
        return None
    raw[-1] = raw[-1][:end[1]]
    raw[0] = raw[0][start[1]:]
    expression = _tokens(b"".join(raw).decode(errors="replace"))
    if expression is None:
        return None
    flags = code.co_flags
    count = (code.co_argcount + code.co_kwonlyargcount + bool(flags & inspect.CO_VARARGS)
             + bool(flags & inspect.CO_VARKEYWORDS))
    return f"lambda {','.join(code.co_varnames[:count])}:\n{expression}"


#: a line :func:`inspect.findsource` takes as where a code object's block starts
_BLOCK_START = re.compile(r"^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)")


def _lines(code: types.CodeType) -> list[str]:
    """The lines of the file ``code`` was compiled from, as :func:`inspect.findsource`
    reads them, without its slow look-up of every loaded module's path. Empty if none."""
    try:
        file = inspect.getsourcefile(code) or code.co_filename
    except TypeError:
        return []
    if file.startswith("<"):
        return linecache.getlines(file)
    if not os.path.exists(file) and file not in linecache.cache:
        found = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file]
        return linecache.getlines(file, found[0].__dict__) if found else []
    linecache.checkcache(file)
    return linecache.getlines(file)


_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_MARK = {tokenize.INDENT: "<indent>", tokenize.DEDENT: "<dedent>", tokenize.NEWLINE: "<newline>"}


def _tokens(text: str) -> str | None:
    """``text``'s Python tokens, one a line, with block markers; an f-string counts as its
    text, so the tokens are the same in every Python version."""
    text = textwrap.dedent(text).strip("\n") + "\n"
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    opened: tuple[int, int] | None = None  # where the outermost f-string began
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            name = tokenize.tok_name[token.type]
            if name.endswith("STRING_START"):
                opened = opened if depth else token.start
                depth += 1
            elif name.endswith("STRING_END"):
                depth -= 1
                if not depth and opened is not None:
                    out.append(_between(lines, opened, token.end))
            elif not depth and token.type not in _SKIP:
                out.append(_MARK.get(token.type, token.string))
    except (IndentationError, SyntaxError, tokenize.TokenError):
        return None
    while out and out[-1] in ("<newline>", "<dedent>"):  # the end, however it is marked
        out.pop()
    while out and out[0] == "<indent>":
        out.pop(0)
    return "\n".join(out)


def _between(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The text from ``start`` to ``end`` (tokenize's (row, column) positions)."""
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1]:end[1]]
    return (lines[start[0] - 1][start[1]:] + "".join(lines[start[0]:end[0] - 1])
            + lines[end[0] - 1][:end[1]])


def _array(value: Any) -> str:
    if _SOURCES_ONLY.get():
        return "array"
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - a key array, an array spread over other processes
        return f"object({_name_of(type(value))})"
    if array.dtype.hasobject:  # its bytes are addresses
        return f"object({_name_of(type(value))})"
    data = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return f"array({array.dtype.str};{array.shape};{data})"


def _is_jax_array(value: Any) -> bool:
    return isinstance(value, jax.Array) and getattr(value, "is_fully_addressable", True)


def _function_of(item: Any) -> types.FunctionType | None:
    """The function a class attribute defines (a method or property getter), or None."""
    if isinstance(item, (staticmethod, classmethod)):
        item = item.__func__
    elif isinstance(item, property):
        item = item.fget
    return item if isinstance(item, types.FunctionType) else None


def _name_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"

