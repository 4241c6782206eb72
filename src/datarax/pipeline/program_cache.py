"""Compiled steps kept on disk, so a second process skips tracing and lowering.

JAX's persistent compilation cache saves the XLA compile, but every process still
traces the step and lowers it to StableHLO before it can look the executable up —
most of a first batch's time. :class:`CachedStep` wraps a step's ``jax.jit`` and, on
the first call with a given argument signature, loads the serialized executable
(``jax.experimental.serialize_executable``) saved by an earlier process under a
fingerprint of everything the program depends on (:mod:`datarax.pipeline.fingerprint`:
the NNX graph definition with its stages' code and configs, the batch size, the
arguments' tree, shapes, dtypes and shardings, package versions, datarax's source,
``jax.config``, backend and devices). Later calls run that executable directly.

Anything short of a clean hit falls back to the ordinary path and is logged on the
``datarax.program_cache`` logger: a missing entry, one that fails its checksum or
header (stale, corrupt, another version), a step that cannot be fingerprinted (then
nothing is written). A miss compiles, checks that the serialized executable loads and
gives the same batch as the compiled one, and writes the entry atomically. Entries
live in ``datarax-programs/`` inside JAX's compilation cache directory (see
:mod:`datarax.compilation_cache`; ``DATARAX_PROGRAM_CACHE=0`` turns this off, and
it is off when several processes run together); like JAX's cache, loading an entry
runs code from it, so keep that directory your own.

Example:
    >>> import jax, numpy as np
    >>> step = CachedStep(jax.jit(lambda x: x + 1), ("doc-example", 1))
    >>> int(step(np.int32(2)))
    3
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from datarax.compilation_cache import program_cache_dir
from datarax.pipeline.fingerprint import Unfingerprintable, environment, fingerprint

logger = logging.getLogger("datarax.program_cache")

_FORMAT = b"datarax-program-v1\n"
_MAX_ENTRIES = 1024  # ~0.3 MB each for a W1 step
_FRESH_COMPILE_OPTIONS = {"xla_embed_ir_in_executable": False}  # XLA's default
# What happened to steps this process: loaded, stored, missing, rejected,
# unfingerprintable, not_stored. Read with :func:`counts`.
_COUNTS: Counter[str] = Counter()
_LOCK = threading.Lock()


class _NotStorable(ValueError):
    """A compiled step that cannot work in another process."""


def counts() -> dict[str, int]:
    """How many steps this process loaded from disk, stored, missed, rejected..."""
    with _LOCK:
        return dict(_COUNTS)


def _count(event: str) -> None:
    with _LOCK:
        _COUNTS[event] += 1


def argument_signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The tree, shapes, dtypes, weak types and shardings of a call's arguments."""
    leaves, treedef = jax.tree.flatten(args)
    described = []
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            described.append(
                ("array", leaf.shape, str(leaf.dtype), bool(getattr(leaf, "weak_type", False)),
                 repr(leaf.sharding), bool(getattr(leaf, "committed", True)))
            )
        elif isinstance(leaf, (np.ndarray, np.generic)):
            described.append(("numpy", np.shape(leaf), str(leaf.dtype)))
        elif isinstance(leaf, (bool, int, float, complex)):
            described.append(("python", type(leaf).__name__))
        else:
            raise Unfingerprintable(f"a step argument of type {type(leaf).__name__}")
    return (str(treedef), tuple(described))


class CachedStep:
    """A jitted step whose executables come from disk when an earlier process saved them.

    ``identity`` describes the program apart from its arguments (for the steps: the
    NNX graph definition and the batch size); it must be fingerprintable for the step
    to be cached on disk. ``_cache_size()`` counts executables held, so callers can
    tell a call that compiled (or loaded) from one that ran.
    """

    def __init__(self, jitted: Callable[..., Any], identity: Any) -> None:
        self._jitted = jitted
        self._identity = identity
        self._identity_print: str | None = None
        self._executables: dict[Any, Any] = {}
        self._last: Any = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        last = self._last
        if last is self._jitted:  # not stored on disk: plain jit for every signature
            return last(*args)
        if last is not None:
            try:
                return last(*args)
            except (TypeError, ValueError):  # another signature or sharding: look it up
                pass
        return self._slow_call(args)

    def _cache_size(self) -> int:
        size = getattr(self._jitted, "_cache_size", None)
        return len(self._executables) + (int(size()) if callable(size) else 0)

    def lower(self, *args: Any) -> Any:
        return self._jitted.lower(*args)

    # ---------------------------------------------------------------- slow path
    def _slow_call(self, args: tuple[Any, ...]) -> Any:
        directory = program_cache_dir()
        if directory is None or jax.process_count() > 1:
            # (several processes: each compiles for its own devices, as JAX places them)
            self._last = self._jitted
            return self._jitted(*args)
        try:
            signature = argument_signature(args)
        except Unfingerprintable as err:
            _count("unfingerprintable")
            logger.info("step not cached on disk: it depends on %s", err)
            self._last = self._jitted
            return self._jitted(*args)
        with self._lock:
            executable = self._executables.get(signature)
            if executable is None:
                executable, batch = self._obtain(directory, signature, args)
                if executable is None:  # not fingerprintable: plain jit from now on
                    self._last = self._jitted
                    return self._jitted(*args)
                self._executables[signature] = executable
                self._last = executable
                if batch is not None:
                    return batch
        self._last = executable
        return executable(*args)

    def _key(self, signature: tuple[Any, ...]) -> str | None:
        try:
            if self._identity_print is None:
                self._identity_print = fingerprint(self._identity)
            return fingerprint((self._identity_print, signature, environment()))
        except Unfingerprintable as err:
            _count("unfingerprintable")
            logger.info("step not cached on disk: it depends on %s", err)
            return None

    def _obtain(
        self, directory: Path, signature: tuple[Any, ...], args: tuple[Any, ...]
    ) -> tuple[Any, Any]:
        """An executable, loaded or freshly compiled, and its first batch; ``(None,
        None)`` to use the plain jitted step."""
        key = self._key(signature)
        if key is None:
            return None, None
        path = directory / f"{key}.xla"
        loaded = _load(path, key)
        if loaded is not None:
            try:  # the first batch is waited for anyway; a failure to run is caught here
                batch = jax.block_until_ready(loaded(*args))
                _count("loaded")
                logger.info("loaded compiled step from %s", path)
                return loaded, batch
            except Exception as err:  # noqa: BLE001 - the entry is replaced, never fatal
                _count("rejected")
                logger.warning("stored step %s failed to run (%s); compiling it again", path, err)
        return _compile_and_store(self._jitted, args, path, key)


# -------------------------------------------------------------------- entries
def _load(path: Path, key: str) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        _count("missing")
        logger.debug("no stored step %s", path.name)
        return None
    except OSError as err:
        _count("rejected")
        logger.warning("cannot read stored step %s (%s); compiling it again", path, err)
        return None
    try:
        executable = _decode(raw, key)
    except Exception as err:  # noqa: BLE001 - any bad entry is replaced, never fatal
        _count("rejected")
        logger.warning("ignoring stored step %s: %s; compiling it again", path, err)
        return None
    try:
        os.utime(path)  # recently used: kept when the directory is trimmed
    except OSError:
        pass
    return executable


def _decode(raw: bytes, key: str) -> Any:
    from jax.experimental.serialize_executable import deserialize_and_load

    if not raw.startswith(_FORMAT):
        raise ValueError("not a datarax program entry (or an older format)")
    header_end = raw.index(b"\n", len(_FORMAT))
    stored_key, digest, devices = raw[len(_FORMAT):header_end].decode().split(" ", 2)
    payload = raw[header_end + 1:]
    if stored_key != key:
        raise ValueError("its key does not match its file name")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError("its checksum does not match (truncated or corrupt)")
    serialized, in_tree, out_tree = pickle.loads(payload)
    by_id = {d.id: d for d in jax.devices()}
    execution = [by_id[int(i)] for i in devices.split(",")]
    return deserialize_and_load(serialized, in_tree, out_tree, execution_devices=execution)


def _encode(compiled: Any, key: str, executable_bytes: bytes | None = None) -> tuple[bytes, Any]:
    """The entry for ``compiled`` and the executable loaded back from it.

    ``executable_bytes``: the XLA executable as JAX's persistent cache held it, used in
    place of serializing the loaded one again (which XLA:CPU cannot do faithfully).
    """
    from jax.experimental import serialize_executable as jax_serialize

    unloaded = compiled._executable._unloaded_executable
    if unloaded.host_callbacks or unloaded.keepalive or unloaded.ordered_effects or (
        unloaded.unordered_effects
    ):  # callbacks into this process (jax.debug.print, pure_callback) do not travel
        raise _NotStorable("the step calls back into Python")
    if compiled._params.const_args:
        raise _NotStorable("the step closes over constants JAX passes as arguments")
    devices = ",".join(str(d.id) for d in unloaded.device_list)
    if executable_bytes is None:
        serialized, in_tree, out_tree = jax_serialize.serialize(compiled)
    else:
        serialized, in_tree, out_tree = _serialize_with(compiled, unloaded, executable_bytes)
    payload = pickle.dumps((serialized, in_tree, out_tree), protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(payload).hexdigest()
    raw = _FORMAT + f"{key} {digest} {devices}\n".encode() + payload
    by_id = {d.id: d for d in jax.devices()}
    execution = [by_id[int(i)] for i in devices.split(",")]
    reloaded = jax_serialize.deserialize_and_load(
        serialized, in_tree, out_tree, execution_devices=execution
    )
    return raw, reloaded


def _serialize_with(compiled: Any, unloaded: Any, executable_bytes: bytes) -> tuple[bytes, Any, Any]:
    """``serialize_executable.serialize``'s format, with the executable's bytes given."""
    import io

    from jax._src.lib import xla_client
    from jax.experimental.serialize_executable import _JaxPjrtPickler

    class Pickler(_JaxPjrtPickler):
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, xla_client.LoadedExecutable):
                return ("exec", executable_bytes)
            return super().persistent_id(obj)

    args_info_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
    with io.BytesIO() as file:
        Pickler(file).dump((unloaded, args_info_flat, compiled._no_kwargs))
        return file.getvalue(), in_tree, compiled.out_tree


def _same_batch(a: Any, b: Any) -> bool:
    left, left_tree = jax.tree.flatten(a)
    right, right_tree = jax.tree.flatten(b)
    if left_tree != right_tree:
        return False
    for x, y in zip(left, right, strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        if not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=x.dtype.kind in "fc"):
            return False
    return True


def _compile_and_store(jitted: Any, args: tuple[Any, ...], path: Path, key: str) -> tuple[Any, Any]:
    """Compile, check the entry loads back and gives the same batch, write it.

    An executable JAX loaded from its own persistent cache cannot be serialized again
    on XLA:CPU (it keeps only the kernels it linked; loading it later fails with
    "Function ... not found"), so the entry takes the bytes that cache held; if they
    cannot be had or fail the check, the step is compiled once more with that cache
    bypassed (on the run that writes the entry only).
    """
    compiled = batch = None
    for fresh in (False, True):
        captured: bytes | None = None
        if fresh:
            candidate = _compile_bypassing_persistent_cache(jitted, args)
        else:
            candidate, captured = _compile_capturing_cached_bytes(jitted, args)
        if candidate is None:
            break
        compiled, batch = candidate, candidate(*args)
        try:
            raw, reloaded = _encode(compiled, key, captured)
            if _same_batch(batch, reloaded(*args)):
                _write(path, raw)
                _count("stored")
                logger.info("stored compiled step in %s", path)
                return compiled, batch
        except _NotStorable as err:
            logger.info("compiled step not stored on disk: %s", err)
            break
        except Exception as err:  # noqa: BLE001 - not storable: the step still runs
            logger.debug("compiled step not storable (%s)", err)
    _count("not_stored")
    logger.info("compiled step could not be stored on disk; it runs uncached")
    if compiled is None:
        return None, None
    return compiled, batch


def _compile_capturing_cached_bytes(jitted: Any, args: tuple[Any, ...]) -> tuple[Any, bytes | None]:
    """Compile; when JAX's persistent cache served the executable, also its bytes."""
    try:
        from jax._src import compilation_cache as jax_cache  # private: no public hook
    except ImportError:
        return jitted.lower(*args).compile(), None
    original = getattr(jax_cache, "extract_executable_and_time", None)
    if original is None:
        return jitted.lower(*args).compile(), None
    captured: list[bytes] = []

    def spy(data: Any) -> Any:
        out = original(data)
        captured.append(out[0])
        return out

    jax_cache.extract_executable_and_time = spy
    try:
        compiled = jitted.lower(*args).compile()
    finally:
        jax_cache.extract_executable_and_time = original
    # another thread's compile may have read the cache meanwhile: then not ours to know
    return compiled, captured[0] if len(captured) == 1 else None


def _compile_bypassing_persistent_cache(jitted: Any, args: tuple[Any, ...]) -> Any:
    """A fresh compile: JAX's persistent cache off, and an option at its default value
    that keys the compile apart from the one JAX already holds in memory."""
    try:
        from jax._src import compilation_cache as jax_cache  # private: no public switch

        previous = jax.config.jax_enable_compilation_cache
        jax.config.update("jax_enable_compilation_cache", False)
        jax_cache.reset_cache()
        try:
            return jitted.lower(*args).compile(_FRESH_COMPILE_OPTIONS)
        finally:
            jax.config.update("jax_enable_compilation_cache", previous)
            jax_cache.reset_cache()
    except Exception as err:  # noqa: BLE001 - then the step is simply not stored
        logger.debug("could not compile bypassing the persistent cache (%s)", err)
        return None


def _write(path: Path, raw: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".xla")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(raw)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _trim(path.parent)


def _trim(directory: Path) -> None:
    """Keep the ``_MAX_ENTRIES`` most recently used entries."""
    try:
        entries = sorted(directory.glob("*.xla"), key=lambda p: p.stat().st_mtime)
        for stale in entries[: max(len(entries) - _MAX_ENTRIES, 0)]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass
