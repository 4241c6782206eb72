"""``ShardCache``: a bounded local folder of downloaded files, shared by processes.

Layout of the folder (``DATARAX_CACHE_DIR``, default ``~/.cache/datarax`` or
``$XDG_CACHE_HOME/datarax``; created on first use, never on import)::

    shards/<key>-<name>   # complete, verified files only
    locks/<key>-<name>.lock
    tmp/<...>.part        # downloads in progress (each locked by its writer)
    cache.lock            # held while space is reserved or freed

``key`` is the file's SHA-256 when known, else a hash of URL, size and version tag (a
file changed in the store gets a new entry).

* **Shared**: a download holds the entry's exclusive ``flock`` (a second process waits
  for it); a file in use holds a shared lock, which eviction never breaks.
* **Atomic**: a download goes to ``tmp/``, is verified, then renamed into ``shards/``; a
  crash's ``.part`` file is removed by the next process that reserves space.
* **Bounded**: a download's full size is reserved (``posix_fallocate``) under
  ``cache.lock``, evicting least recently used entries no process holds; else
  :class:`CacheFullError`, with nothing partial left.

``DATARAX_CACHE_BYTES`` sets the default limit (``"20G"``, ``"512M"``, bytes; 64 GiB).

Example:
    >>> import os, tempfile
    >>> from datarax.storage.urls import RemoteObject
    >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=1000)
    >>> obj = RemoteObject("memory://b/a.bin", 3, etag="1")
    >>> def download(part):
    ...     with open(part, "r+b") as f:
    ...         f.write(b"abc")
    >>> with cache.acquire(obj, download) as entry:
    ...     open(entry.path, "rb").read()
    b'abc'
    >>> cache.usage(), parse_bytes("2K")
    (3, 2048)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Any

from datarax.errors import ConfigError
from datarax.host.cache_home import cache_home
from datarax.host.settings import env_folder, env_size, parse_bytes, read_size
from datarax.storage.errors import CacheFullError
from datarax.storage.retry import StorageStats
from datarax.storage.urls import FileBlock, RemoteObject, expand_user

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_CACHE_BYTES", "CacheEntry", "ShardCache", "default_cache_dir", "parse_bytes"]

DEFAULT_CACHE_BYTES = 64 << 30


def default_cache_dir() -> str:
    """``DATARAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/datarax``, else ``~/.cache/datarax``."""
    return env_folder("DATARAX_CACHE_DIR") or os.path.join(cache_home(), "datarax")


def given_cache(cache: Any, where: str) -> ShardCache:
    """``cache`` when it is a :class:`ShardCache`, a new default one for None; else a
    ConfigError naming ``where``."""
    if cache is None:
        return ShardCache()
    if isinstance(cache, ShardCache):
        return cache
    hint = ("there is no switch to read without the cache; ArrayRecordSourceModule(..., "
            "ranged_reads=True) downloads no whole file" if isinstance(cache, bool) else
            f"for the folder: cache=ShardCache({os.fspath(cache)!r}, max_bytes=...)"
            if isinstance(cache, (str, os.PathLike)) else "")
    raise ConfigError(
        f"{where}: cache must be a datarax.storage.ShardCache(directory, max_bytes) or None "
        f"(DATARAX_CACHE_DIR, DATARAX_CACHE_BYTES), got {type(cache).__name__} {cache!r}"
        + (f"; {hint}." if hint else "."))


def _check_private(folder: str) -> None:
    """A ConfigError unless ``folder`` is writable by this user alone."""
    if os.name != "posix":  # pragma: no cover - owners and mode bits say nothing there
        return
    info = os.stat(folder)
    if info.st_uid != os.getuid():
        why = f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"group or others may write it (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise ConfigError(
        f"the shard cache folder '{folder}' is not private to this user: {why}, so files "
        "someone else put there would be read as the store's. Give each user a folder of "
        "their own (the default, ~/.cache/datarax, is): `chmod 700` a folder you own, or "
        "point DATARAX_CACHE_DIR (or cache=ShardCache(directory, ...)) elsewhere.")


def _key(obj: RemoteObject) -> str:
    if obj.sha256:
        return obj.sha256[:40]
    text = f"{obj.url}\0{obj.size}\0{obj.etag}"
    if isinstance(obj, FileBlock):  # a range of a file: of that version of the file
        text += f"\0{obj.offset}\0{obj.file.sha256 if obj.file is not None else None}"
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _complete(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except FileNotFoundError:
        return False


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[-80:] or "file"


class CacheEntry:
    """A complete file in the cache, held (shared lock) until :meth:`release`."""

    def __init__(self, path: str, lock_fd: int) -> None:
        self.path = path
        self._fd: int | None = lock_fd

    def release(self) -> None:
        """Let eviction remove the file again (its bytes stay until then)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock

    def __enter__(self) -> CacheEntry:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


class ShardCache:
    """A local folder of remote files, at most ``max_bytes`` big.

    Args:
        directory: the folder (default :func:`default_cache_dir`); created on first use.
        max_bytes: the size limit (an int or ``"20G"``; default ``DATARAX_CACHE_BYTES`` or
            64 GiB).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 max_bytes: int | str | None = None) -> None:
        if fcntl is None:  # pragma: no cover
            raise ConfigError("ShardCache needs POSIX file locks (fcntl); this platform has none.")
        self.directory = os.path.abspath(expand_user(directory)) if directory else default_cache_dir()
        self.max_bytes = (env_size("DATARAX_CACHE_BYTES", DEFAULT_CACHE_BYTES, least=1)
                          if max_bytes is None else
                          read_size(max_bytes, "ShardCache max_bytes", least=1))
        self._made = False
        self._guard = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardCache({self.directory!r}, max_bytes={self.max_bytes})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ShardCache, (self.directory, self.max_bytes))

    # ----------------------------------------------------------------- paths
    def _dir(self, part: str) -> str:
        return os.path.join(self.directory, part)

    def ensure(self) -> None:
        """Create the folder and its parts; a ConfigError naming it when it cannot be
        created or written."""
        if not self._made:
            try:
                for attempt in range(3):  # a cleanup removing the folder as it is made: again
                    try:
                        self._make()
                        break
                    except FileNotFoundError:
                        if attempt == 2:
                            raise
            except OSError as err:
                where = f" ('{err.filename}')" if err.filename else ""
                raise ConfigError(
                    f"the shard cache folder '{self.directory}' cannot be created or written: "
                    f"{err.strerror or err}{where}. Point DATARAX_CACHE_DIR (or the source's "
                    "cache=ShardCache(directory, ...)) at a folder you can write, on a local "
                    "disk with room for the files read at once.") from err
            self._made = True

    def _make(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        _check_private(self.directory)
        for part in ("shards", "locks", "tmp"):
            os.makedirs(self._dir(part), mode=0o700, exist_ok=True)
            if not os.access(self._dir(part), os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "Permission denied", self._dir(part))
            _check_private(self._dir(part))

    def entry_name(self, obj: RemoteObject) -> str:
        return f"{_key(obj)}-{_safe_name(obj.name)}"

    def path_of(self, obj: RemoteObject) -> str | None:
        """The cached file of ``obj`` (complete and verified), or None."""
        path = os.path.join(self._dir("shards"), self.entry_name(obj))
        return path if _complete(path, obj.size) else None

    # ------------------------------------------------------------------- use
    def acquire(self, obj: RemoteObject, download: Callable[[str], None], *,
                stats: StorageStats | None = None,
                spare: Callable[[], Container[str]] | None = None,
                last: Callable[[], Sequence[str]] | None = None) -> CacheEntry:
        """The cached file of ``obj``, held until the entry is released; when absent,
        ``download(part_path)`` writes and verifies its bytes into ``part_path`` (already
        ``obj.size`` long; on failure the partial file is removed). ``spare()``: paths not
        to evict; ``last()``: paths evicted after every other entry, the last first.

        Raises:
            CacheFullError: ``obj`` does not fit next to the entries in use, or the disk is full.
        """
        for attempt in range(3):
            self.ensure()
            try:
                return self._acquire(obj, download, stats, spare, last)
            except FileNotFoundError as err:
                # the folder was removed while in use (a cleanup of ~/.cache or /tmp): made again
                inside = str(err.filename or "").startswith(self.directory + os.sep)
                if not inside or attempt == 2:
                    raise
                with self._guard:
                    self._made = False
        raise AssertionError("unreachable")  # pragma: no cover

    def _acquire(self, obj: RemoteObject, download: Callable[[str], None],
                 stats: StorageStats | None, spare: Callable[[], Container[str]] | None,
                 last: Callable[[], Sequence[str]] | None) -> CacheEntry:
        name = self.entry_name(obj)
        final = os.path.join(self._dir("shards"), name)
        fd = os.open(os.path.join(self._dir("locks"), name + ".lock"), os.O_RDWR | os.O_CREAT,
                     0o644)
        try:
            # shared first: a file another process is reading (it holds a shared lock) is
            # used at once; only a missing one waits for the exclusive lock (a download)
            fcntl.flock(fd, fcntl.LOCK_SH)
            present = _complete(final, obj.size)
            if not present:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another process may be downloading it: wait
                present = _complete(final, obj.size)
            if present:
                if stats is not None:
                    stats.add("cache_hits")
            else:
                self._fill(obj, final, download, stats, spare, last)
            with contextlib.suppress(OSError):
                os.utime(final)  # most recently used
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        return CacheEntry(final, fd)

    def _fill(self, obj: RemoteObject, final: str, download: Callable[[str], None],
              stats: StorageStats | None, spare: Callable[[], Container[str]] | None,
              last: Callable[[], Sequence[str]] | None = None) -> None:
        part = os.path.join(self._dir("tmp"), f"{secrets.token_hex(6)}-{os.path.basename(final)}.part")
        part_fd = self._reserve(obj, part, stats, spare, last)
        try:
            try:
                download(part)
                with open(part, "rb+") as f:
                    os.fsync(f.fileno())
            except OSError as err:
                if err.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._disk_full(obj, err) from err
                raise
            os.replace(part, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
        finally:
            os.close(part_fd)

    def _disk_full(self, obj: RemoteObject, err: OSError) -> CacheFullError:
        return CacheFullError(
            f"the local disk of the cache '{self.directory}' is full ({err.strerror or err}) "
            f"while storing '{obj.url}' ({obj.size} bytes); the cache uses {self.usage()} bytes "
            f"of its limit of {self.max_bytes}, and nothing partial was kept. Free space on "
            "that disk, point DATARAX_CACHE_DIR at a larger disk, or lower DATARAX_CACHE_BYTES "
            "to what the disk can hold.", disk_full=True)

    def _reserve(self, obj: RemoteObject, part: str, stats: StorageStats | None,
                 spare: Callable[[], Container[str]] | None = None,
                 last: Callable[[], Sequence[str]] | None = None) -> int:
        """Make room for ``obj`` and create ``part`` at its full size (locked by us)."""
        if obj.size > self.max_bytes:
            raise CacheFullError(
                f"'{obj.url}' ({obj.size} bytes) is larger than the cache limit of "
                f"{self.max_bytes} bytes ('{self.directory}'); raise DATARAX_CACHE_BYTES or "
                "the source's cache max_bytes.")
        with self._global_lock():
            self._drop_stale_parts()
            self._make_room(obj.size, obj, stats, spare() if spare is not None else (),
                            last() if last is not None else ())
            fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                try:
                    os.posix_fallocate(fd, 0, obj.size) if obj.size else None
                except OSError as err:
                    if err.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise self._disk_full(obj, err) from err
                    os.ftruncate(fd, obj.size)  # no fallocate on this filesystem
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(part)
                raise
        return fd

    @contextlib.contextmanager
    def _global_lock(self) -> Iterator[None]:
        with self._guard:
            fd = os.open(os.path.join(self.directory, "cache.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _drop_stale_parts(self) -> None:
        for entry in os.scandir(self._dir("tmp")):
            with contextlib.suppress(OSError):
                fd = os.open(entry.path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its writer is gone
                    os.unlink(entry.path)
                except BlockingIOError:
                    pass
                finally:
                    os.close(fd)

    def _entries(self) -> list[tuple[float, int, str]]:
        out = []
        for folder in ("shards", "tmp"):
            for entry in os.scandir(self._dir(folder)):
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat()
                    out.append((st.st_mtime, st.st_size, entry.path if folder == "shards" else ""))
        return out

    def snapshot(self) -> tuple[tuple[str, int, int], ...]:
        """Name, size and mtime of every entry and download in progress: two equal
        snapshots mean no reader of the folder took, fetched or used a file between them."""
        out = []
        for folder in ("shards", "tmp"):
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(self._dir(folder)):
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat()
                        out.append((entry.path, st.st_size, st.st_mtime_ns))
        return tuple(sorted(out))

    def usage(self) -> int:
        """Bytes the cache holds now (complete entries and reserved downloads)."""
        if not os.path.isdir(self._dir("shards")):
            return 0
        return sum(size for _, size, _ in self._entries())

    def _make_room(self, need: int, obj: RemoteObject, stats: StorageStats | None,
                   spare: Container[str] = (), last: Sequence[str] = ()) -> None:
        entries = self._entries()
        used = sum(size for _, size, _ in entries)
        if used + need <= self.max_bytes:
            return
        # least recently used first, then ``last`` from its end
        rank = {path: k for k, path in enumerate(last)}
        victims = sorted((e for e in entries if e[2] and e[2] not in spare),
                         key=lambda e: (e[2] in rank, -rank.get(e[2], 0), e[0]))
        for _, size, path in victims:
            if self._evict(path):
                if stats is not None:
                    stats.add("evicted")
                used -= size
                if used + need <= self.max_bytes:
                    return
        raise CacheFullError(
            f"the cache '{self.directory}' (limit {self.max_bytes} bytes) cannot hold "
            f"'{obj.url}' ({obj.size} bytes): {used} bytes are files in use or being "
            "downloaded. Raise the limit (DATARAX_CACHE_BYTES or the source's cache "
            "max_bytes), or free space by ending other readers of the folder.")

    def _evict(self, path: str) -> bool:
        """Remove one complete entry if no process holds it."""
        lock = os.path.join(self._dir("locks"), os.path.basename(path) + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)

    def discard(self, path: str, digest_of: Callable[[str], str] | None = None,
                expected: str | None = None) -> bool:
        """Remove the cached file at ``path`` as damaged (with ``digest_of``, only when
        ``digest_of(path) != expected``); returns whether it was removed."""
        try:
            before = os.stat(path)
            if digest_of is not None and digest_of(path) == expected:
                return False
            after = os.stat(path)
            if (before.st_ino, before.st_size) != (after.st_ino, after.st_size):
                return False  # replaced meanwhile (another process fetched it again)
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def clear(self) -> int:
        """Remove every entry no process holds; returns how many were removed."""
        if not os.path.isdir(self._dir("shards")):
            return 0
        with self._global_lock():
            self._drop_stale_parts()
            return sum(self._evict(e.path) for e in list(os.scandir(self._dir("shards"))))
