"""What a failed or changed read of a remote file means, as a datarax error naming the
file and what to do. A mixin of :class:`~datarax.storage.fetch.Fetcher`.
"""

from __future__ import annotations

from typing import Any

from datarax.storage.errors import RemoteObjectError, RemoteStoreError, store_error
from datarax.storage.retry import StorageStats
from datarax.storage.urls import RemoteObject, version_tag

__all__ = ["FetchErrors"]


class FetchErrors:
    """The error builders of :class:`~datarax.storage.fetch.Fetcher`."""

    stats: StorageStats

    def _missing(self, obj: RemoteObject, err: BaseException) -> RemoteObjectError:
        self.stats.add("failed")
        if obj.sha256 is not None:  # named by a dataset's metadata, never listed
            return RemoteObjectError(
                f"'{obj.url}' is missing from the store, though the dataset's metadata names it "
                f"(not uploaded with the rest of the folder, or deleted since; "
                f"{type(err).__name__}: {err}). Upload it (copy the whole dataset folder: its "
                "datarax_dataset.json and every shard), or read with on_error='skip'.",
                url=obj.url)
        return RemoteObjectError(
            f"'{obj.url}' was deleted from the store after the dataset was listed "
            f"({type(err).__name__}: {err}); restore it, or read with on_error='skip'.",
            url=obj.url)

    def _version_now(self, fs: Any, path: str) -> str | None:
        try:
            return version_tag(fs.info(path))
        except Exception:  # noqa: BLE001 - the mismatch is reported without it
            return None

    def _version_changed(self, obj: RemoteObject, was: str | None, now: str | None,
                         start: int, end: int) -> RemoteObjectError:
        self.stats.add("failed")
        when = "listed" if obj.etag is not None else "first opened"
        return RemoteObjectError(
            f"'{obj.url}' changed in the store since it was {when}: a read of bytes "
            f"{start}-{end} found version {now!r} there, its reads are tied to version "
            f"{was!r} (the one {when}); those bytes were not used. The dataset was rewritten "
            "while being read: let the writes finish, then rebuild the source (it lists and "
            "opens the files again, and the cache keeps the versions apart), or read with "
            "on_error='skip' to skip this file's records.", url=obj.url)

    def _unreadable(self, fs: Any, path: str, obj: RemoteObject,
                    err: OSError) -> RemoteObjectError | RemoteStoreError:
        """The error of a read of ``obj`` that failed with ``err`` (not a missing object)."""
        store = store_error(obj.url, err)
        # the file changed (e.g. shorter: a range past its end), unless the store failed
        changed = None if store is not None else self._now_differs(fs, path, obj)
        if changed:
            return self._changed(obj, changed)
        self.stats.add("failed")
        return store or RemoteObjectError(
            f"cannot read '{obj.url}': {err}. Check the object in the store, or read with "
            "on_error='skip' to skip its records.", url=obj.url)

    def _now_differs(self, fs: Any, path: str, obj: RemoteObject) -> str | None:
        """How ``obj`` differs in the store now from when it was listed (one request), or None."""
        try:
            info = fs.info(path)
        except Exception:  # noqa: BLE001 - the read's own error is reported instead
            return None
        size, now = info.get("size"), version_tag(info)
        if size is not None and int(size) != obj.span[2]:
            return f"it holds {size} bytes now, {obj.span[2]} when listed"
        if obj.etag is not None and now is not None and now != obj.etag:
            return f"version {now!r} now, {obj.etag!r} when listed"
        return None

    def _changed(self, obj: RemoteObject, detail: str) -> RemoteObjectError:
        self.stats.add("failed")
        return RemoteObjectError(
            f"'{obj.url}' changed in the store since the dataset was listed ({detail}); the "
            "dataset was rewritten while being read. Rebuild the source (it lists the files "
            "again), or read with on_error='skip'.", url=obj.url)
