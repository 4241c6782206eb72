"""Stable fingerprints of what a compiled step is built from, across processes.

The on-disk program cache (:mod:`datarax.pipeline.program_cache`) may reuse a
compiled step only when everything the traced program depends on is the same. Python's
own ``hash`` is per process (functions hash by identity), so this module describes
values by content instead:

* plain values (numbers, strings, bytes, tuples, lists, dicts, enums, dataclasses,
  numpy arrays and dtypes, tree definitions) by their contents;
* functions by their code (every nested code object), defaults, closure cells and the
  globals their code names — with the attributes it reads from a module of the user's;
  classes by name and by the functions and values they define;
* anything from a versioned package (jax, flax, numpy, the standard library) by its
  qualified name, and datarax's own code by a hash of its source files (an editable
  install changes code without changing the version).

What it cannot describe reliably — an object of an unknown type closed over by a
stage, a generator, an open file — raises :class:`Unfingerprintable`, and the step is
not cached on disk: two different programs must never share one fingerprint.

Invariant: equal fingerprints mean equal inputs to tracing (given the same package
versions); a code or value change anywhere the step reads changes the fingerprint.
A program that reads state its code does not name (environment variables, files) at
trace time is outside what any jit cache can see; so are constants (not functions)
patched into jax, flax or datarax modules at run time.

Example:
    >>> scale = 2.0
    >>> f = lambda x: x * scale
    >>> g = lambda x: x * scale
    >>> fingerprint(f) == fingerprint(g)  # same code, same closure and globals
    True
    >>> fingerprint(lambda x: x * 3.0) == fingerprint(f)
    False
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import functools
import hashlib
import os
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

# Top-level packages whose objects are named, not walked: their code is pinned by
# the versions in :func:`environment` (datarax by its source hash).
_VERSIONED = frozenset(
    {"jax", "jaxlib", "flax", "numpy", "ml_dtypes", "opt_einsum", "datarax", "typing_extensions"}
) | frozenset(sys.stdlib_module_names)
_MAX_NODES = 200_000
# Class attributes that are bookkeeping, not behaviour.
_CLASS_SKIP = frozenset(
    {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
        "__firstlineno__", "__static_attributes__", "__abstractmethods__", "_abc_impl",
        "__orig_bases__", "__parameters__", "__dataclass_fields__", "__dataclass_params__",
        "__match_args__", "__slots__", "__hash__", "__init_subclass__", "__class_getitem__",
    }
)
_DATACLASS_MADE = frozenset(
    {"__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__setattr__",
     "__delattr__", "__getstate__", "__setstate__", "__replace__"}
)


class Unfingerprintable(TypeError):
    """A value the fingerprint cannot describe reliably (the step is not cached)."""


def fingerprint(value: Any) -> str:
    """Hex SHA-256 of ``value``'s content description; raises :class:`Unfingerprintable`."""
    return hashlib.sha256(repr(_Walker().walk(value)).encode()).hexdigest()


def _top(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _versioned(module: str | None) -> bool:
    return _top(module) in _VERSIONED


@functools.lru_cache(maxsize=1)
def datarax_source_hash() -> str:
    """SHA-256 over datarax's ``.py`` files (path, size, modification time), once per
    process: the test Python itself uses to decide whether cached bytecode is current,
    so it changes whenever the code that runs can have changed."""
    root = str(Path(__file__).resolve().parents[1])
    digest = hashlib.sha256()
    for directory, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(directory, name))
                digest.update(f"{directory[len(root):]}/{name} {info.st_size} "
                              f"{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


class _Walker:
    """One description: memo of finished objects, markers for objects in progress."""

    def __init__(self) -> None:
        self._done: dict[Any, Any] = {}
        self._active: dict[Any, int] = {}
        self._keep: list[Any] = []  # keep walked objects alive so ids stay unique
        self._nodes = 0

    def walk(self, value: Any, names: frozenset[str] = frozenset()) -> Any:
        self._nodes += 1
        if self._nodes > _MAX_NODES:
            raise Unfingerprintable("the value is too large to describe")
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            return (type(value).__name__, value)
        key = id(value)
        if isinstance(value, types.ModuleType):  # described by what the reader names
            key = (key, names)  # type: ignore[assignment]
        if key in self._done:
            return self._done[key]
        if key in self._active:  # a cycle: refer back to the object being described
            return ("cycle", self._active[key])
        self._active[key] = len(self._active)
        self._keep.append(value)
        try:
            out = self._describe(value, names)
        finally:
            del self._active[key]
        self._done[key] = out
        return out

    # ------------------------------------------------------------- dispatch
    def _describe(self, value: Any, names: frozenset[str]) -> Any:
        kind = type(value)
        if kind in (tuple, list, set, frozenset):
            items = [self.walk(v) for v in value]
            if kind in (set, frozenset):
                items.sort(key=repr)
            return (kind.__name__, tuple(items))
        if isinstance(value, tuple) and not isinstance(value, type):  # named tuples
            return ("tuple-of", self._class(kind), tuple(self.walk(v) for v in value))
        if isinstance(value, type):
            return self._class(value)
        if isinstance(value, types.FunctionType):
            return self._function(value)
        if isinstance(value, types.MethodType):
            return ("method", self.walk(value.__func__), self.walk(value.__self__))
        if isinstance(value, types.ModuleType):
            return self._module(value, names)
        if isinstance(value, functools.partial):
            return ("partial", self.walk(value.func), self.walk(value.args),
                    self.walk(dict(value.keywords)))
        if isinstance(value, enum.Enum):
            return ("enum", self._class(kind), value.name)
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.ascontiguousarray(value)
            if array.dtype.hasobject:
                raise Unfingerprintable("a numpy array of Python objects")
            return ("ndarray", str(array.dtype), array.shape,
                    hashlib.sha256(array.view(np.uint8).reshape(-1)).hexdigest())
        if isinstance(value, np.dtype):
            return ("dtype", str(value))
        if isinstance(value, (types.BuiltinFunctionType, np.ufunc)):
            owner = getattr(value, "__module__", None) or getattr(
                getattr(value, "__self__", None), "__name__", None
            )
            if isinstance(value, np.ufunc):
                owner = "numpy"
            if _versioned(owner) or owner is None and value.__name__ in vars(builtins):
                return ("builtin", owner, value.__qualname__ if hasattr(value, "__qualname__")
                        else value.__name__)
            raise Unfingerprintable(f"built-in {value!r} from {owner}")
        treedef = _treedef_text(value)
        if treedef is not None:
            return ("treedef", treedef)
        if dataclasses.is_dataclass(value):
            fields = tuple(
                (f.name, self.walk(getattr(value, f.name)))
                for f in dataclasses.fields(value)
                if hasattr(value, f.name)
            )
            return ("dataclass", self._class(kind), fields)
        if isinstance(value, dict) or _is_mapping(value):
            return ("mapping", self._class(kind),
                    tuple((self.walk(k), self.walk(v)) for k, v in value.items()))
        custom = _DESCRIBERS.get(f"{kind.__module__}.{kind.__qualname__}")
        if custom is not None:
            return ("custom", self._class(kind), self.walk(custom(value)))
        return self._object(value)

    # ------------------------------------------------------------- kinds
    def _function(self, fn: types.FunctionType) -> Any:
        qualname = fn.__qualname__
        if _versioned(fn.__module__) and "<" not in qualname and _resolves(fn):
            return ("named", fn.__module__, qualname)
        code = fn.__code__
        used = _code_names(code)
        globals_ = tuple(
            (name, self.walk(_not_mutable(fn.__globals__[name], name, fn), used))
            for name in sorted(used)
            if name in fn.__globals__
        )
        builtins_ = tuple(
            sorted(n for n in used if n not in fn.__globals__ and n in vars(builtins))
        )
        cells = tuple(
            self._cell(c, name, fn) for c, name in zip(fn.__closure__ or (), code.co_freevars)
        )
        return (
            "function", fn.__module__, qualname, self._code(code),
            self.walk(fn.__defaults__), self.walk(fn.__kwdefaults__), cells, globals_, builtins_,
            self.walk(dict(fn.__dict__)) if fn.__dict__ else None,
        )

    def _cell(self, cell: Any, name: str, fn: Any) -> Any:
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned later)
            return ("empty-cell",)
        return self.walk(_not_mutable(content, name, fn))

    def _code(self, code: types.CodeType) -> Any:
        consts = tuple(
            self._code(c) if isinstance(c, types.CodeType) else self.walk(c)
            for c in code.co_consts
        )
        return (
            code.co_name, code.co_code, consts, code.co_names, code.co_varnames,
            code.co_freevars, code.co_cellvars, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, code.co_flags,
        )

    def _class(self, cls: type) -> Any:
        if _versioned(cls.__module__) and "<" not in cls.__qualname__:
            # methods patched in at run time (tests, hot fixes) are not in the package
            patched = tuple(
                (klass.__qualname__, name, self.walk(member))
                for klass in cls.__mro__
                for name, member in vars(klass).items()
                if isinstance(member, types.FunctionType) and not _versioned(member.__module__)
            )
            return ("class", cls.__module__, cls.__qualname__, patched)
        body = []
        for klass in cls.__mro__:
            if klass is object or (_versioned(klass.__module__) and klass is not cls):
                body.append(("base", klass.__module__, klass.__qualname__))
                continue
            made = _DATACLASS_MADE if dataclasses.is_dataclass(klass) else frozenset()
            members = []
            for name, member in vars(klass).items():
                if name in _CLASS_SKIP or name in made:
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = (member.fget, member.fset, member.fdel)
                members.append((name, self.walk(member)))
            body.append(("own", klass.__module__, klass.__qualname__, tuple(members)))
        return ("user-class", tuple(body))

    def _module(self, module: types.ModuleType, names: frozenset[str]) -> Any:
        if _versioned(module.__name__):
            return ("module", module.__name__)
        # A user's module: what the code reads from it (``mylib.SCALE``, ``mylib.f``).
        attrs = tuple(
            (name, self.walk(getattr(module, name), names))
            for name in sorted(names)
            if hasattr(module, name)
        )
        return ("user-module", module.__name__, attrs)

    def _object(self, value: Any) -> Any:
        kind = type(value)
        if _versioned(kind.__module__):
            named = _named_object(value)
            if named is not None:
                return named
            wrapped = getattr(value, "__wrapped__", None)
            if wrapped is not None and callable(wrapped):  # jax.jit / custom_jvp of a user fn
                return ("wrapper", self._class(kind), self.walk(wrapped))
            raise Unfingerprintable(
                f"an object of type {kind.__module__}.{kind.__qualname__}"
            )
        state = getattr(value, "__dict__", None)
        if state is None or hasattr(kind, "__slots__") or hasattr(value, "__getstate__") and (
            type(value).__getstate__ is not object.__getstate__
        ):
            raise Unfingerprintable(f"an object of type {kind.__module__}.{kind.__qualname__}")
        return ("object", self._class(kind), self.walk(dict(state)))


def _not_mutable(value: Any, name: str, fn: Any) -> Any:
    """``value`` unless it is mutable state a function reads or changes as it runs
    (a list, dict or set, an object of the user's): such a function may depend on when
    it is traced (it counts traces, collects values), so its step is not stored."""
    mutable = isinstance(value, (list, dict, set, bytearray))
    if not mutable and not isinstance(
        value, (type, types.FunctionType, types.MethodType, types.ModuleType, functools.partial,
                np.ndarray, np.generic, enum.Enum, tuple, frozenset)
    ):
        kind = type(value)
        mutable = hasattr(value, "__dict__") and not _versioned(kind.__module__) and not (
            dataclasses.is_dataclass(value) and kind.__dataclass_params__.frozen  # type: ignore[attr-defined]
        )
    if mutable:
        raise Unfingerprintable(
            f"mutable state: {fn.__qualname__} reads '{name}', a {type(value).__name__}"
        )
    return value


def _code_names(code: types.CodeType) -> frozenset[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return frozenset(names)


def _resolves(obj: Any) -> bool:
    """Whether ``module.qualname`` names ``obj`` itself (not a later redefinition)."""
    target: Any = sys.modules.get(obj.__module__)
    for part in obj.__qualname__.split("."):
        target = getattr(target, part, None)
        if target is None:
            return False
    return target is obj or getattr(target, "__wrapped__", None) is obj


def _named_object(value: Any) -> Any:
    """A module-level object of a versioned package (``jnp.float32``, ``jax.nn.relu``)."""
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or not _versioned(module):
        return None
    if "<" in qualname or not _resolves_named(module, qualname, value):
        return None
    return ("named", module, qualname)


def _resolves_named(module: str, qualname: str, value: Any) -> bool:
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return False
    return target is value


def _treedef_text(value: Any) -> str | None:
    import jax

    if isinstance(value, jax.tree_util.PyTreeDef):
        return str(value)
    return None


def _is_mapping(value: Any) -> bool:
    from collections.abc import Mapping

    return isinstance(value, Mapping)


def _column_store(store: Any) -> Any:
    return store._signature  # field paths, shapes, dtypes: the arrays are step inputs


def _session(_: Any) -> Any:
    return ()  # Python-only bookkeeping, never read by the traced step


# datarax classes whose instances sit in NNX graph definitions as static values and
# define equality by a signature (so equal sources share a step); described by it.
_DESCRIBERS = {
    "datarax.sources.memory._ColumnStore": _column_store,
    "datarax.core.data_source._Session": _session,
}


@functools.lru_cache(maxsize=1)
def _process_environment() -> tuple[Any, ...]:
    import platform

    import flax
    import jax
    import jaxlib

    import datarax

    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            lines = info.read().split("\n\n", 1)[0].splitlines()
        cpu = "\n".join(
            line for line in lines if line.startswith(("model name", "flags", "vendor_id"))
        )
    except OSError:
        cpu = platform.processor()
    devices = jax.devices()
    return (
        sys.version, platform.machine(), cpu,
        jax.__version__, jaxlib.__version__, flax.__version__, np.__version__,
        datarax.__version__, datarax_source_hash(),
        jax.default_backend(), devices[0].client.platform_version, jax.process_count(),
        tuple((d.id, d.device_kind, d.process_index) for d in devices),
    )


# jax.config values that change messages or caching, not the traced program.
_CONFIG_IGNORED = frozenset(
    {
        "jax_log_compiles", "jax_logging_level", "jax_explain_cache_misses",
        "jax_compilation_cache_dir", "jax_enable_compilation_cache",
        "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes",
        "jax_raise_persistent_cache_errors", "jax_compilation_cache_max_size",
        "jax_pprint_use_color", "jax_traceback_filtering", "jax_dump_ir_to", "jax_dump_ir_modes",
        "jax_tracer_error_num_traceback_frames", "jax_debug_log_modules",
    }
)


def environment() -> tuple[Any, ...]:
    """What outside the step shapes its executable: Python, CPU, package versions,
    datarax's source, backend and devices, and the current ``jax.config`` values."""
    import jax

    config = tuple(
        (name, repr(value))
        for name, value in sorted(jax.config.values.items())
        if name not in _CONFIG_IGNORED
    )
    return (*_process_environment(), config, _foreign_code_in_datarax())


def _foreign_code_in_datarax() -> Any:
    """Functions from outside the versioned packages that sit in datarax's modules
    (patched in at run time): the steps may call them, so they are part of the key."""
    walker = _Walker()
    found = []
    for name, module in sorted(sys.modules.items()):
        if _top(name) != "datarax" or module is None:
            continue
        for attr, value in vars(module).items():
            function = value.func if isinstance(value, functools.partial) else value
            if isinstance(function, types.FunctionType) and not _versioned(function.__module__):
                found.append((name, attr, walker.walk(value)))
    return tuple(found)
