"""One writer at a time per dataset folder: a file lock in the destination.

A write holds an exclusive lock (``fcntl.flock``) on ``DST/.datarax-lock``; a second one
(another process or thread) is refused at once, naming the holder, rather than mixing
its shards in. The lock goes with its process, however it ends (never stale); calls in
the same thread nest (``convert`` holds the lock around ``write_dataset``'s).

Example:
    >>> import os, tempfile
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> with folder_lock(dst, error=RuntimeError):
    ...     with folder_lock(dst, error=RuntimeError):  # nested in this thread
    ...         os.listdir(dst)
    ['.datarax-lock']
    >>> os.path.exists(dst)  # created for the lock, removed again: nothing was written
    False
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator


try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "folder_lock"]

LOCK_FILE = ".datarax-lock"

_held: dict[str, int] = {}  # folder -> the thread holding its lock
_held_lock = threading.Lock()


@contextlib.contextmanager
def folder_lock(dst: str | os.PathLike[str], *, error: type[Exception],
                what: str = "this write") -> Iterator[None]:
    """Hold the write lock of folder ``dst`` (created when missing) for the block.

    Raises ``error`` naming ``dst`` and the holder when another process or thread holds
    it. A file (refused by the writer) and a URL (a bucket has no file locks) are not
    locked; without POSIX file locks only writers in this process are kept apart.
    """
    # imported here: a writer's worker process, which takes no lock, need not import storage
    from datarax.storage.urls import expand_user, is_remote

    dst = expand_user(dst)
    if is_remote(dst) or (os.path.exists(dst) and not os.path.isdir(dst)):
        yield
        return
    key = os.path.realpath(dst)
    me = threading.get_ident()
    with _held_lock:
        holder = _held.get(key)
        if holder is not None and holder != me:
            raise error(_busy(dst, what, f"another thread of this process ({os.getpid()})"))
        _held[key] = me
    if holder == me:  # nested in this thread: the outer call holds the lock
        yield
        return
    created = not os.path.exists(dst)
    fd: int | None = None
    try:
        try:
            os.makedirs(dst, exist_ok=True)
            fd = _acquire(dst, what, error)
        except OSError as err:
            raise error(_unwritable(dst, err)) from err
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(dst, LOCK_FILE))
            os.close(fd)  # drops the flock
        if created:  # nothing written (e.g. refused options): leave no empty folder
            with contextlib.suppress(OSError):
                os.rmdir(dst)
        with _held_lock:
            del _held[key]


def _acquire(dst: str, what: str, error: type[Exception]) -> int:
    """The descriptor of ``DST/.datarax-lock``, locked; raises ``error`` when held."""
    path = os.path.join(dst, LOCK_FILE)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None:  # pragma: no cover
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise error(_busy(dst, what, f"process {holder}")) from None
        try:  # the file may have been removed by a writer that just finished: lock anew
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} on {socket.gethostname()}".encode())
        return fd


def _unwritable(dst: str, err: OSError) -> str:
    """Why the folder ``dst`` cannot be created or written (``err``), and what to do."""
    reason = err.strerror or str(err)
    where = f" ('{err.filename}')" if err.filename and os.fspath(err.filename) != dst else ""
    return (f"cannot write the dataset folder '{dst}': {reason}{where}. Pick a destination "
            "whose parent folders exist as folders (or can be created) and that you may "
            "write to, on a disk with free space.")


def _busy(dst: str, what: str, holder: str) -> str:
    return (f"'{dst}' is being written by another conversion ({holder} holds "
            f"'{os.path.join(dst, LOCK_FILE)}'), so {what} was refused: two writers in one "
            "folder would mix their shards. Wait for that conversion to finish (its lock goes "
            "when its process ends), or write into another folder.")
