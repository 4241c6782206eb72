"""datarax's own compiled steps, kept on disk keyed by the program they run.

:func:`stored_jit` stands where ``jax.jit`` stood for a pipeline's steps: a step is
keyed by its lowered program text plus versions, backend, options, CPU features and
argument signature, so an edited stage or a new JAX is never served an old executable.
Only datarax's data steps are stored, and only executables XLA compiled in this process
(one JAX loaded from its own persistent cache is not: on CPU it serializes without its
compiled functions); no JAX option is changed. Where, the size cap, safety, bad entries
and JAX's cache: docs/reliability.md, "Compiled steps on disk".

Example:
    >>> import numpy as np
    >>> double = stored_jit(lambda x: x * 2)
    >>> double(np.arange(3, dtype=np.int32)).tolist()
    [0, 2, 4]
    >>> sorted(counts())
    ['compiled', 'corrupt', 'loaded', 'reused', 'stored']
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import os
import platform
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

from datarax.core.program_weight import ELEMENTAL_MAX_WEIGHT, program_weight
from datarax.core.user_jax import compiled_here, jax_debugging
from datarax.host.cache_home import cache_home
from datarax.host.settings import env_folder, env_size, switched_on

log = logging.getLogger("datarax.compile")

#: options XLA compiles datarax's data steps with, per backend: faster compiles, the
#: same values bit for bit (tests/pipeline/test_optimization_level.py; docs/reliability.md)
COMPILER_OPTIONS: dict[str, dict[str, Any]] = {
    "cpu": {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False}}
DEFAULT_CAP_BYTES = 512 * 2**20
_FORMAT = b"datarax-compiled-1\n"
_TEMP_PREFIX = ".tmp-"
#: a temporary file older than this (seconds) is one a killed write left: removed
STALE_TEMP_SECONDS = 3600
#: JAX settings a thread may set for itself that change what a function lowers to
LOWERING_SETTINGS = (
    "jax_enable_x64", "jax_default_device", "jax_default_matmul_precision",
    "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion", "jax_default_prng_impl",
    "jax_threefry_partitionable", "jax_softmax_custom_jvp", "jax_debug_nans",
    "jax_debug_infs", "jax_enable_checks",
)
_COUNTS: collections.Counter[str] = collections.Counter(
    {"compiled": 0, "loaded": 0, "reused": 0, "stored": 0, "corrupt": 0})
#: (entry checksum, argument and result trees) -> executable loaded; most recent last
_LOADED: collections.OrderedDict[Any, Any] = collections.OrderedDict()
_LOADED_SIZE = 32
_LOADED_LOCK = threading.Lock()
_REFUSED: set[str] = set()  # folders already warned about
_UNKNOWN_OPTIONS: set[str] = set()  # compile options the installed XLA refused as unknown


def counts() -> dict[str, int]:
    """Step executables this process ``compiled`` (or JAX's persistent cache served),
    ``loaded``, ``reused`` (loaded before, not deserialized again), ``stored`` and found
    ``corrupt``."""
    return dict(_COUNTS)


def cache_dir() -> Path | None:
    """The store's folder (``~`` expanded, made absolute), or None when
    ``DATARAX_COMPILE_CACHE=0`` turns it off."""
    if not switched_on("DATARAX_COMPILE_CACHE"):
        return None
    given = env_folder("DATARAX_COMPILE_CACHE_DIR")
    if given:
        return Path(given)
    return Path(cache_home()) / "datarax" / "compiled"


def _private_folder() -> Path | None:
    """The store's folder, made 0700 if missing; None (warned once) if it is off or
    someone else could write it."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        if not folder.exists():
            folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the shard cache's too
            folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as err:
        return _refuse(folder, f"it cannot be created ({err})",
                       "point XDG_CACHE_HOME or DATARAX_COMPILE_CACHE_DIR at a folder you may write")
    if not stat.S_ISDIR(info.st_mode):
        return _refuse(folder, "it is not a folder (a link or a file)",
                       "remove it, or point DATARAX_COMPILE_CACHE_DIR at a folder of your own")
    if os.name != "posix":  # mode bits and owners say nothing there (ACLs do)
        return folder
    if info.st_uid != os.getuid():
        return _refuse(folder, f"it belongs to user id {info.st_uid}, not to this user",
                       "point DATARAX_COMPILE_CACHE_DIR at a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _refuse(folder, f"group or others may write it (mode {stat.S_IMODE(info.st_mode):o})",
                       f"run `chmod 700 {folder}`")
    return folder


def _refuse(folder: Path, why: str, fix: str) -> None:
    if str(folder) not in _REFUSED:
        _REFUSED.add(str(folder))
        warnings.warn(
            f"datarax's compiled-step store {folder} is not used: {why}. Steps are "
            f"compiled in every process instead. To keep them, {fix}; to silence this, "
            "set DATARAX_COMPILE_CACHE=0.",
            RuntimeWarning, stacklevel=4,
        )
    return None


def _leaf_signature(leaf: Any) -> tuple[Any, ...]:
    if isinstance(leaf, jax.Array):
        return (leaf.shape, leaf.dtype, leaf.weak_type, leaf.sharding)
    if isinstance(leaf, (np.ndarray, np.generic)):
        return (leaf.shape, leaf.dtype)
    return (type(leaf), getattr(leaf, "shape", None), getattr(leaf, "dtype", None))


def signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a call's compiled program depends on besides the function."""
    leaves, tree = jax.tree.flatten(args)
    settings = tuple(getattr(jax.config, name, None) for name in LOWERING_SETTINGS)
    return tree, tuple(map(_leaf_signature, leaves)), settings, jax.sharding.get_mesh()


def program_device(args: tuple[Any, ...]) -> Any:
    """The device a one-device program called with ``args`` runs on: that of its committed
    array arguments (``stages_on="host"`` commits them to the CPU), else this thread's default."""
    for leaf in jax.tree.leaves(args):
        if isinstance(leaf, jax.Array) and leaf.committed:
            return min(leaf.sharding.device_set, key=lambda device: device.id)
    chosen = jax.config.jax_default_device
    return jax.devices(chosen)[0] if chosen is None or isinstance(chosen, str) else chosen


def _program_key(text: str, args: tuple[Any, ...], device: Any) -> str:
    parts = [
        _FORMAT, text.encode(), jax.__version__, jaxlib.__version__,
        device.platform, device.device_kind, getattr(device.client, "platform_version", ""),
        repr(sorted(compiler_options(text, device.platform).items())),
        repr(jax.config.jax_enable_x64),
        repr([_leaf_signature(leaf) for leaf in jax.tree.leaves(args)]),
        repr(jax.config.jax_default_device), repr(jax.sharding.get_mesh()),
        os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", ""), _host(),
    ]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """The host's machine type and CPU features (a CPU executable is built for its CPU)."""
    features = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith(("flags", "Features", "model name")):
                    features += line
                if line.strip() == "":  # the first processor's block is enough
                    break
    except OSError:
        pass
    # (platform.processor() runs a subprocess on Linux)
    return f"{platform.machine()} {features or platform.processor()}"


def compiler_options(text: str | None = None, backend: str | None = None) -> dict[str, Any]:
    """The :data:`COMPILER_OPTIONS` of ``backend`` (or the default backend), without the elemental
    emitters where ``text`` may be too heavy for them (:mod:`datarax.core.program_weight`)."""
    options = dict(COMPILER_OPTIONS.get(backend or jax.default_backend(), {}))
    if (text is not None and options.get("xla_cpu_use_fusion_emitters") is False
            and program_weight(text) > ELEMENTAL_MAX_WEIGHT):
        del options["xla_cpu_use_fusion_emitters"]
    return options


def compile_with_options(lowered: Any, text: str | None = None,
                         backend: str | None = None) -> Any:
    """``lowered.compile()`` with :func:`compiler_options`, less any option the installed
    XLA does not know (left out from then on): an option changes speed, never whether it runs.

    Example:
        >>> import jax, numpy as np
        >>> compiled = compile_with_options(jax.jit(lambda x: x * 2).lower(np.float32(1)))
        >>> float(compiled(np.float32(3)))
        6.0
    """
    text = lowered.as_text() if text is None else text
    while True:
        options = {k: v for k, v in compiler_options(text, backend).items()
                   if k not in _UNKNOWN_OPTIONS}
        try:
            return lowered.compile(compiler_options=options or None)
        except jax.errors.JaxRuntimeError as err:
            said = str(err)  # (not ``text``: the retry weighs the program, not this)
            unknown = [k for k in options
                       if "No such compile option" in said and f"'{k}'" in said]
            if not unknown:
                raise
            log.debug("datarax: XLA does not know the compile option(s) %s; left out", unknown)
            _UNKNOWN_OPTIONS.update(unknown)


def _load(path: Path, lowered: Any, device: Any) -> Any | None:
    """The executable at ``path`` loaded for the program's ``device`` (a :class:`LoadedOnTrial`),
    or None (missing, corrupt or unloadable); bytes loaded before are not deserialized again."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_FORMAT) + 32
    checksum = data[len(_FORMAT):head]
    if data[: len(_FORMAT)] != _FORMAT or hashlib.sha256(data[head:]).digest() != checksum:
        _COUNTS["corrupt"] += 1
        log.warning("datarax: compiled step %s is corrupt; compiling it again", path.name)
        return None
    memo = _memo_key(checksum, lowered)
    with _LOADED_LOCK:
        loaded = _LOADED.get(memo) if memo is not None else None
        if loaded is not None:
            _LOADED.move_to_end(memo)
    if loaded is not None:
        _COUNTS["reused"] += 1
    else:
        try:
            compiled = serialize_executable.deserialize_and_load(
                data[head:], lowered.in_tree, lowered.out_tree, backend=device.client,
                execution_devices=[device])
        except Exception as err:  # noqa: BLE001 - an entry that cannot load is compiled again
            _COUNTS["corrupt"] += 1
            log.warning("datarax: compiled step %s did not load (%s); compiling it again",
                        path.name, err)
            return None
        _COUNTS["loaded"] += 1
        loaded = LoadedOnTrial(compiled, lowered, path, device.platform)
        if memo is not None:
            with _LOADED_LOCK:
                _LOADED[memo] = loaded
                while len(_LOADED) > _LOADED_SIZE:
                    _LOADED.popitem(last=False)
    try:
        os.utime(path)  # recently used: the size cap removes it last
    except OSError:
        pass
    return loaded


def _memo_key(checksum: bytes, lowered: Any) -> Any | None:
    """The :data:`_LOADED` key (None where a tree cannot be hashed)."""
    key = (checksum, lowered.in_tree, lowered.out_tree)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _store(folder: Path, path: Path, compiled: Any) -> None:
    try:
        payload = serialize_executable.serialize(compiled)[0]
    except Exception as err:  # noqa: BLE001 - a program that cannot be serialized stays in memory
        log.debug("datarax: compiled step not stored (%s)", err)
        return
    data = _FORMAT + hashlib.sha256(payload).digest() + payload
    if len(data) > cap_bytes():  # alone over the cap: not kept, so the folder stays under it
        log.info("datarax: compiled step (%d bytes) not stored: over DATARAX_COMPILE_CACHE_BYTES",
                 len(data))
        _trim_quietly(folder, keep=None)
        return
    try:
        handle, temp = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
    except OSError as err:
        log.warning("datarax: compiled step not stored in %s (%s)", folder, err)
        return
    _COUNTS["stored"] += 1
    _trim_quietly(folder, keep=path)


def _trim_quietly(folder: Path, keep: Path | None) -> None:
    try:
        _trim(folder, keep)
    except OSError as err:  # another process trimming the same folder
        log.debug("datarax: compiled-step store not trimmed (%s)", err)


def cap_bytes() -> int:
    """The store's size cap: ``DATARAX_COMPILE_CACHE_BYTES`` or :data:`DEFAULT_CAP_BYTES`."""
    return env_size("DATARAX_COMPILE_CACHE_BYTES", DEFAULT_CAP_BYTES, least=0,
                    hint="; 0 keeps nothing, DATARAX_COMPILE_CACHE=0 turns the store off")


def _trim(folder: Path, keep: Path | None) -> None:
    """Remove the least recently used entries but ``keep`` until the folder fits the cap,
    and temporary files a process ended inside a write left (older than an hour)."""
    entries = []
    stale = time.time() - STALE_TEMP_SECONDS
    for entry in os.scandir(folder):
        is_temp = entry.name.startswith(_TEMP_PREFIX)
        if not (entry.name.endswith(".exe") or is_temp) or keep and entry.name == keep.name:
            continue
        try:
            info = entry.stat()
            if is_temp and info.st_mtime < stale:
                os.unlink(entry.path)
        except OSError:
            continue
        if not is_temp:
            entries.append((info.st_mtime, info.st_size, entry.path))
    total = sum(size for _, size, _ in entries) + (keep.stat().st_size if keep else 0)
    cap = cap_bytes()
    for _, size, entry_path in sorted(entries):
        if total <= cap:
            break
        try:
            os.unlink(entry_path)
        except OSError:
            continue
        total -= size


def compile_lowered(lowered: Any, args: tuple[Any, ...]) -> Any:
    """The executable of ``lowered``: loaded from the store, else compiled and stored
    (unless JAX's persistent cache served it: :func:`compile_here`)."""
    # one device only: with several, a loaded executable may expect other input shardings;
    # the switch is read (and a bad value refused) either way
    folder = _private_folder() if cache_dir() and jax.device_count() == 1 else None
    path, text, device = None, lowered.as_text(), program_device(args)
    if folder is not None:
        cap_bytes()  # a bad cap is refused before any work
        path = folder / f"{_program_key(text, args, device)}.exe"
        loaded = _load(path, lowered, device)
        if loaded is not None:
            return loaded
    compiled, here = compile_here(lowered, text, device.platform)
    _COUNTS["compiled"] += 1
    if folder is not None and path is not None:
        if here:
            _store(folder, path, compiled)
        else:  # JAX's cache serves it next time too
            log.debug("datarax: compiled step %s not stored: JAX's persistent compilation "
                      "cache served it", path.name)
    return compiled


def compile_here(lowered: Any, text: str | None = None,
                 backend: str | None = None) -> tuple[Any, bool]:
    """:func:`compile_with_options`, and whether XLA compiled it in this process (False:
    JAX's persistent compilation cache served it, :func:`~datarax.core.user_jax.compiled_here`).
    An executable JAX loaded from its cache serializes, on CPU, without its compiled
    functions: stored, it would load in a later process and fail at its first run
    ("Function ... not found")."""
    return compiled_here(lambda: compile_with_options(lowered, text, backend))


class LoadedOnTrial:
    """A stored executable until its first call has run: if the runtime cannot run it
    (a loaded entry may miss a kernel), the entry is removed and the program compiled
    afresh and run. The first call waits for its outputs (XLA runs asynchronously: a
    failure would otherwise rise later, at a host read). Other attributes are the
    executable's."""

    def __init__(self, compiled: Any, lowered: Any, path: Path, backend: str | None = None):
        self.compiled, self.lowered, self.path, self.backend = compiled, lowered, path, backend

    def __call__(self, *args: Any) -> Any:
        lowered = self.lowered
        if lowered is None:
            return self.compiled(*args)
        try:
            out = jax.block_until_ready(self.compiled(*args))
        except jax.errors.JaxRuntimeError as err:
            log.warning("datarax: compiled step %s did not run (%s); compiling it again",
                        self.path.name, err)
            _COUNTS["corrupt"] += 1
            try:
                self.path.unlink()
            except OSError:
                pass
            self.compiled = compile_with_options(lowered, backend=self.backend)
            _COUNTS["compiled"] += 1
            out = self.compiled(*args)
        self.lowered = None  # it ran: the store's entry is good
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)


class StoredJit:
    """``fn`` compiled once per argument signature (:func:`stored_jit`); thread-safe: a
    second caller of a signature being compiled waits. What :meth:`prepare` raised is
    raised once, by the first call of that signature."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.jitted = jax.jit(fn)
        self.compiled: dict[Any, Any] = {}  # signature -> Compiled or Future
        self.failed: dict[Any, BaseException] = {}  # what prepare() met, not yet raised
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        found = self.compiled.get(signature(args))
        if found is None or isinstance(found, Future) or jax_debugging():
            found = self.executable(*args)
        return found(*args)

    def prepare(self, *args: Any) -> None:
        """Compile (or load) the program for ``args`` now, without running it."""
        self.executable(*args, ahead=True)

    def executable(self, *args: Any, ahead: bool = False) -> Any:
        """The compiled program for ``args`` (compiled, or loaded, now if needed); while a
        user debugs (:func:`jax_debugging`) the ``jax.jit`` of the function instead."""
        if jax_debugging() and not ahead:
            return self.jitted
        key = signature(args)
        while True:
            with self.lock:
                found = self.compiled.get(key)
                failed = None if found is not None else self.failed.pop(key, None)
                if found is None and failed is None:
                    mine: Future[Any] = Future()
                    self.compiled[key] = mine
            if failed is not None:
                if ahead:  # not this caller's to meet: left for the first call
                    with self.lock:
                        self.failed[key] = failed
                raise failed
            if found is None:
                break
            if not isinstance(found, Future):
                return found
            try:
                return found.result()
            except BaseException as err:  # noqa: BLE001 - the owner's failure: met below, or try here
                if not (found.done() and found.exception() is err):
                    raise  # this thread's own Ctrl-C, met while it waited
                continue  # the owner's, its Ctrl-C too: not this thread's to meet
        try:
            compiled = compile_lowered(self.jitted.lower(*args), args)
        except BaseException as err:
            with self.lock:
                del self.compiled[key]
                if ahead:  # kept without this thread's frames (they hold the arguments)
                    self.failed[key] = err.with_traceback(None)
            mine.set_exception(err)
            raise
        with self.lock:
            self.compiled[key] = compiled
        mine.set_result(compiled)
        return compiled


def stored_jit(fn: Callable[..., Any]) -> StoredJit:
    """``fn`` compiled like ``jax.jit(fn)``, its executables kept in the on-disk store."""
    return StoredJit(fn)
