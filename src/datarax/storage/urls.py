"""Remote paths through fsspec: which paths are remote, listing, small reads.

A path is *remote* when it is a URL with a scheme (any fsspec protocol; ``storage_options``
go to the filesystem, datarax's defaults added where they set nothing). S3's own retries
are off unless ``storage_options`` set them: the fetcher retries, within its budget.

Example:
    >>> is_remote("s3://bucket/data"), is_remote("/data/train"), is_remote("C:/data")
    (True, False, False)
    >>> join_url("s3://bucket/ds", "a.array_record")
    's3://bucket/ds/a.array_record'
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import json
import os
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from datarax.errors import ConfigError, MissingExtraError, RecordError
from datarax.extras import require
from datarax.storage.errors import RemoteStoreError, store_error
from datarax.storage.retry import RetryPolicy, StorageStats, is_access_refused, with_retries

__all__ = ["S3_CONNECTIONS", "FileBlock", "RemoteObject", "all_remote",
           "check_named_once", "expand_user", "filesystem", "is_remote", "join_url",
           "list_objects", "object_of", "path_list",
           "read_json", "version_tag", "with_versions"]

T = TypeVar("T")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")
_GLOB = re.compile(r"[*?\[]")
_LISTING_THREADS = 16  # requests in flight when a list of URLs is listed


# a URL whose '//' a pathlib.Path made '/' (Path("s3://b/k") is 's3:/b/k'): of these schemes
_CUT_URL = re.compile(r"^(s3|s3a|gs|gcs|https?|memory|file|az|abfss?|hf|hdfs|s?ftp):/(?!/)")


def is_remote(paths: Any) -> bool:
    """Whether ``paths`` (a path, or a list judged by its first entry) names URLs.

    Raises:
        ConfigError: a path is a URL with one slash after its scheme (``s3:/bucket``), as
            ``pathlib.Path("s3://bucket")`` makes it.
    """
    if isinstance(paths, Sequence) and not isinstance(paths, (str, bytes)) and paths:
        for item in paths:
            _refuse_cut_url(item)
        paths = paths[0]
    if isinstance(paths, (str, os.PathLike)):
        _refuse_cut_url(paths)
        return bool(_SCHEME.match(os.fspath(paths)))
    return False


def path_list(paths: Any, where: str) -> list[str]:
    """``paths`` (a path, glob pattern or URL, or a list of them) as a list of ``str``, each
    local path's ``~`` expanded; ``where`` names the argument in messages.

    Raises:
        ConfigError: an empty list, or something else than a path where one goes.

    Example:
        >>> path_list(["a.npy", 3], "NpySourceConfig.paths")
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: NpySourceConfig.paths must be a path, a glob pattern or a list of them (str or os.PathLike), got int 3.
    """
    one = isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Sequence)
    items = [paths] if one else list(paths)
    if not items:
        raise ConfigError(f"{where} is an empty list; name at least one file.")
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise ConfigError(f"{where} must be a path, a glob pattern or a list of them (str or "
                              f"os.PathLike), got {type(item).__name__} {item!r}.")
    return [expand_user(os.fspath(item)) for item in items]


def all_remote(paths: Sequence[str], where: str) -> bool:
    """Whether ``paths`` are URLs rather than local paths; ``where`` names the argument.

    Raises:
        ConfigError: both kinds in one list.
    """
    remote = {is_remote(path) for path in paths}
    if len(remote) > 1:
        raise ConfigError(f"{where} mixes local paths and URLs ({list(paths)}); give one kind: "
                          "the files' URLs (copy the local ones to the store), or local paths.")
    return remote == {True}


def _refuse_cut_url(path: Any) -> None:
    if not isinstance(path, (str, os.PathLike)):
        return
    text = os.fspath(path)
    if isinstance(text, str) and (match := _CUT_URL.match(text)):
        raise ConfigError(
            f"the path {path!r} reads as a URL with one '/' after '{match.group(1)}:' "
            f"(pathlib.Path turns '{match.group(1)}://' into '{match.group(1)}:/'); pass the "
            f"URL as a str, e.g. '{match.group(1)}://{text[match.end():]}'.")


def expand_user(paths: Any) -> Any:
    """``paths`` (one path, or a list / tuple of them) with each local path's leading ``~``
    expanded, as ``str``; URLs and anything that is not a path are returned unchanged.

    Example:
        >>> import os
        >>> expand_user("~/data/x.array_record") == os.path.expanduser("~/data/x.array_record")
        True
        >>> expand_user(["s3://bucket/~/x", "/data/y"])
        ['s3://bucket/~/x', '/data/y']
    """
    if isinstance(paths, (str, os.PathLike)):
        path = os.fspath(paths)
        if not isinstance(path, str) or _SCHEME.match(path):
            return path
        return os.path.expanduser(path)
    if isinstance(paths, (list, tuple)):
        items = [expand_user(p) if isinstance(p, (str, os.PathLike)) else p for p in paths]
        return items if isinstance(paths, list) else tuple(items)
    return paths


def join_url(base: str, name: str) -> str:
    """``base/name`` for a URL (one slash between)."""
    return base.rstrip("/") + "/" + name.lstrip("/")


@dataclasses.dataclass(frozen=True)
class RemoteObject:
    """One remote file: its URL, size in bytes, and when known the store's version tag
    (``etag``), and the SHA-256 and record count a dataset's metadata gives."""

    url: str
    size: int
    etag: str | None = None
    sha256: str | None = None
    records: int | None = None

    @property
    def name(self) -> str:
        """The file name (last part of the URL)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def span(self) -> tuple[int, int, int]:
        """``(start, end, file size)``: the bytes of the file at :attr:`url` this object is."""
        return 0, self.size, self.size


@dataclasses.dataclass(frozen=True)
class FileBlock(RemoteObject):
    """Bytes ``[offset, offset + size)`` of the remote file ``file``: downloaded and cached
    like a file of its own (its cache entry keyed by the file's version and the range).

    Example:
        >>> whole = RemoteObject("s3://b/a.array_record", 100, etag="7")
        >>> block = FileBlock.of(whole, 10, 40)
        >>> block.span, block.name, block.size
        ((10, 40, 100), 'a.array_record@10', 30)
    """

    offset: int = 0
    file: RemoteObject | None = None

    @classmethod
    def of(cls, file: RemoteObject, start: int, end: int, records: int | None = None) -> FileBlock:
        """Bytes ``[start, end)`` of ``file``."""
        if not 0 <= start <= end <= file.size:
            raise ValueError(f"a block of '{file.url}' ({file.size} bytes) must lie inside "
                             f"it, got bytes {start}-{end}.")
        return cls(file.url, end - start, file.etag, None, records, offset=start, file=file)

    @property
    def name(self) -> str:
        return f"{super().name}@{self.offset}"

    @property
    def span(self) -> tuple[int, int, int]:
        whole = self.file.size if self.file is not None else self.offset + self.size
        return self.offset, self.offset + self.size, whole


S3_CONNECTIONS = 64  # S3 requests in flight at once per filesystem, unless storage_options say


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None,
               retry: RetryPolicy | None = None) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` and the path inside it, with ``retry``'s timeouts
    (and for S3 no own retries, :data:`S3_CONNECTIONS`) unless ``storage_options`` set them.

    Raises:
        MissingExtraError: fsspec, or the protocol's package (s3fs, gcsfs), is missing.
        ConfigError: the URL's protocol is unknown to fsspec.
    """
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise ConfigError(
            f"storage_options must be a dict of the filesystem's options (e.g. {{'anon': "
            f"True}}, passed to fsspec for '{url}'), got {type(storage_options).__name__} "
            f"{storage_options!r}.")
    fsspec = require("fsspec", extra="remote", user=f"reading '{url}'")
    match = _SCHEME.match(url)
    protocol = match.group(1).lower() if match else "file"
    options = _with_timeouts(protocol, dict(storage_options or {}), retry or RetryPolicy())
    s3_retries = None
    if protocol in ("s3", "s3a"):
        require("s3fs", extra="remote", user=f"reading '{url}'")
        # s3fs's own retry loop is an attribute, not a constructor option
        s3_retries = int(options.pop("retries", 1))
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", {"mode": "standard", "total_max_attempts": 1})
        # botocore's 10 connections would queue a first batch's hundreds of ranged reads
        config.setdefault("max_pool_connections", S3_CONNECTIONS)
        # botocore builds its user agent anew twice a request unless Config gives one
        config.setdefault("user_agent", _user_agent())
        options["config_kwargs"] = config
    elif protocol in ("gs", "gcs"):
        require("gcsfs", extra="remote", user=f"reading '{url}'")
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as err:  # fsspec knows the protocol; its package is not installed
        raise MissingExtraError(
            f"reading '{url}' needs the fsspec filesystem of '{protocol}://', which is not "
            f"installed ({err}). pip install \"datarax[remote]\" adds s3://, gs:// and "
            "https://; install the package fsspec names for other protocols.") from err
    except ValueError as err:
        raise ConfigError(f"cannot read '{url}': {err} (a protocol fsspec knows, e.g. s3://, "
                          "gs://, https://).") from err
    if s3_retries is not None:
        fs.retries = s3_retries
    return fs, path


@functools.cache
def _user_agent() -> str:
    import platform

    import botocore

    return f"datarax Botocore/{botocore.__version__} Python/{platform.python_version()}"


def _with_timeouts(protocol: str, options: dict[str, Any], retry: RetryPolicy) -> dict[str, Any]:
    """``options`` with ``retry``'s timeouts added where unset."""
    connect, read = retry.connect_timeout_s, retry.read_timeout_s
    if protocol in ("s3", "s3a"):  # botocore: seconds to connect, and between bytes read
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", connect)
        config.setdefault("read_timeout", read)
        options["config_kwargs"] = config
    elif protocol in ("gs", "gcs", "http", "https"):  # aiohttp: no limit on a whole transfer
        try:
            import aiohttp
        except ImportError:  # fsspec says what to install when it makes the filesystem
            return options
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
        if protocol in ("gs", "gcs"):
            options.setdefault("requests_timeout", timeout)
        else:
            client = dict(options.get("client_kwargs") or {})
            client.setdefault("timeout", timeout)
            options["client_kwargs"] = client
    return options


def version_tag(info: Mapping[str, Any]) -> str | None:
    """The version tag (ETag, GCS generation, mtime ...) in an fsspec ``info`` dict."""
    for key in ("ETag", "etag", "generation", "md5Hash"):
        value = info.get(key)
        if value is not None:
            return str(value).strip('"')
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return repr(value.timestamp())
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return repr(float(value))
        if value is not None:
            return str(value)
    return None


def object_of(url: str, info: Mapping[str, Any]) -> RemoteObject:
    """A :class:`RemoteObject` from an fsspec ``info`` dict."""
    size = info.get("size")
    if size is None:
        raise RecordError(f"'{url}': the store does not report its size; datarax needs it to "
                          "cache the file.", path=url)
    return RemoteObject(url, int(size), version_tag(info))


def _url_of(fs: Any, url: str, path: str) -> str:
    protocol = _SCHEME.match(url)
    unstripped = fs.unstrip_protocol(path)
    if protocol and not unstripped.startswith(protocol.group(0)):
        return protocol.group(0) + path.lstrip("/")
    return unstripped


def _listed(fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """``fn`` of each item, up to ``_LISTING_THREADS`` at once."""
    if len(items) == 1:
        return [fn(items[0])]
    with concurrent.futures.ThreadPoolExecutor(min(_LISTING_THREADS, len(items)),
                                               thread_name_prefix="datarax-list") as pool:
        return list(pool.map(fn, items))


def _ask(call: Callable[[], T], url: str, retry: RetryPolicy, stats: StorageStats | None) -> T:
    """``with_retries(call)``, a store failing or refusing raised as RemoteStoreError."""
    try:
        return with_retries(call, url, retry, stats)
    except FileNotFoundError:
        raise
    except Exception as err:
        store = store_error(url, err)
        if store is None:
            raise
        raise store from err


def list_objects(paths: str | Sequence[str], storage_options: Mapping[str, Any] | None = None,
                 *, retry: RetryPolicy | None = None, stats: StorageStats | None = None,
                 where: str = "", folder_hint: str = "") -> list[RemoteObject]:
    """The files ``paths`` names (a URL, a glob pattern, or a list of them, listed
    concurrently), sorted within a pattern, each with its size and version tag;
    ``where`` (e.g. the source's name) starts each message, ``folder_hint`` ends a folder's.

    Raises:
        RecordError: a file is missing or a pattern matches nothing (naming it; the first
            such entry of a list).
        ConfigError: ``paths`` is empty, not paths, local paths (or mixes them with
            URLs), or names a file twice (a glob pattern and a URL it matches too, say).
        RemoteStoreError: the store still fails after every retry, or refuses access
            (credentials missing or expired), naming the URL.
    """
    retry = retry or RetryPolicy()
    items = path_list(paths, "paths")
    if not all_remote(items, "paths"):
        raise ConfigError(f"paths names local paths only ({items}); list_objects lists URLs "
                          "(s3://, gs://, ... any fsspec protocol): give the files' URLs.")

    lead = f"{where}: " if where else ""

    def one(url: str) -> list[RemoteObject]:
        fs, path = filesystem(url, storage_options, retry)
        if _GLOB.search(path):
            try:
                found = _ask(lambda: fs.glob(path, detail=True), url, retry, stats)
            except FileNotFoundError as err:  # e.g. S3's NoSuchBucket
                raise RecordError(f"{lead}the glob pattern '{url}' matches no files: {err} "
                                  f"({type(err).__name__}); check the bucket, the prefix and "
                                  "the pattern.", path=url) from err
            files = sorted((p, i) for p, i in found.items() if i.get("type", "file") != "directory")
            if not files:
                raise RecordError(f"{lead}the glob pattern '{url}' matches no files; check the bucket, "
                                  "the prefix and the pattern.", path=url)
            unsized = [p for p, i in files if i.get("size") is None]  # e.g. an HTTP listing
            if unsized:
                infos = dict(zip(unsized, _listed(
                    lambda p: _ask(lambda: fs.info(p), _url_of(fs, url, p), retry, stats),
                    unsized)))
                files = [(p, infos.get(p, i)) for p, i in files]
            return [object_of(_url_of(fs, url, p), i) for p, i in files]
        try:
            info = _ask(lambda: fs.info(path), url, retry, stats)
        except FileNotFoundError as err:
            # the example's folder: the URL's own, or the bucket a bare 's3://bucket' names
            home = url.rsplit("/", 1)[0] if "/" in url.partition("://")[2] else url
            example = f"{home}/data-*{posixpath.splitext(path)[1]}"
            raise RecordError(f"{lead}'{url}' does not exist; check the bucket and the key (a glob "
                              f"pattern such as '{example}' is expanded).", path=url) from err
        if info.get("type") == "directory":
            raise RecordError(f"{lead}'{url}' is a folder, not a file; name its files, or a "
                              f"glob pattern such as '{url.rstrip('/')}/*'.{folder_hint}", path=url)
        return [object_of(url, info)]

    found = _listed(one, items)
    check_named_once([(url, [o.url for o in objs]) for url, objs in zip(items, found)], where)
    return [obj for objs in found for obj in objs]


def with_versions(objects: Sequence[RemoteObject],
                  storage_options: Mapping[str, Any] | None = None, *,
                  retry: RetryPolicy | None = None, stats: StorageStats | None = None,
                  ) -> list[RemoteObject]:
    """``objects``, each without a version tag given the one its file has in the store now
    (a listing a folder, else an ``info`` request a file), so a file replaced after the
    source was built is refused at its first read (:mod:`~datarax.storage.versions`).

    Raises:
        RemoteStoreError: the store still fails after every retry, or refuses access.
    """
    retry = retry or RetryPolicy()
    folders: dict[str, list[RemoteObject]] = {}
    for obj in objects:
        if obj.etag is None:
            folders.setdefault(obj.url.rsplit("/", 1)[0], []).append(obj)
    found: dict[str, str | None] = {}
    for folder, some in folders.items():
        found.update(_folder_versions(folder, some, storage_options, retry, stats))
    return [dataclasses.replace(o, etag=found[o.url]) if found.get(o.url) else o
            for o in objects]


def _folder_versions(folder: str, objects: list[RemoteObject],
                     storage_options: Mapping[str, Any] | None, retry: RetryPolicy,
                     stats: StorageStats | None) -> dict[str, str | None]:
    """The version tag of each of ``objects`` (files of ``folder``) by URL."""
    fs, path = filesystem(folder, storage_options, retry)
    try:  # refresh, then dropped: a kept listing would name old versions to later asks
        listing = _ask(lambda: fs.ls(path, detail=True, refresh=True), folder, retry, stats)
        fs.invalidate_cache(path)
        infos = {i["name"].rstrip("/").rsplit("/", 1)[-1]: i for i in listing}
        return {o.url: version_tag(infos[o.name]) if o.name in infos else None for o in objects}
    except Exception as err:  # noqa: BLE001 - not listable (refused, HTTP): asked file by file
        if isinstance(err, RemoteStoreError) and not is_access_refused(err):
            raise  # the store is down: the files' own requests would fail alike

    def one(obj: RemoteObject) -> str | None:
        each, where = filesystem(obj.url, storage_options, retry)
        try:
            return version_tag(_ask(lambda: each.info(where), obj.url, retry, stats))
        except FileNotFoundError:  # its first read names it missing
            return None

    return dict(zip([o.url for o in objects], _listed(one, objects)))


def _same_file_key(file: str) -> str:
    """What two names of one file share (``memory:///a`` is ``memory://a``; a real path)."""
    scheme = _SCHEME.match(file)
    if scheme:
        return scheme.group(0) + file[scheme.end():].lstrip("/")
    return os.path.realpath(file)


def check_named_once(named: Sequence[tuple[str, Sequence[str]]], where: str = "",
                     field: str = "paths", mix: str = "mix sources with MixSource weights",
                     ) -> None:
    """Refuse a file that ``field`` names twice (``named``: each entry with the files it
    names), which each epoch would read twice; ``mix`` says how to read one more often.

    Raises:
        ConfigError: naming the file, the two entries that name it and what to do.
    """
    first: dict[str, str] = {}
    for entry, files in named:
        for file in files:
            key = _same_file_key(file)
            if key not in first:
                first[key] = entry
                continue
            earlier = first[key]
            if earlier == entry and not _GLOB.search(entry):
                how = "listed twice"
            else:
                how = "by " + " and again by ".join(
                    f"the glob pattern '{e}'" if _GLOB.search(e) and e != file else f"'{e}'"
                    for e in (earlier, entry))
            raise ConfigError(
                f"{where + ': ' if where else ''}{field} names the file '{file}' twice ({how}), "
                "so each epoch would read it twice. List each file once; to read a file more "
                f"often than the others, {mix}.")


def read_json(url: str, storage_options: Mapping[str, Any] | None = None, *,
              retry: RetryPolicy | None = None, stats: StorageStats | None = None) -> Any | None:
    """The JSON file at ``url``, or None when it does not exist (one request)."""
    retry = retry or RetryPolicy()
    fs, path = filesystem(url, storage_options, retry)
    try:  # start=0: one GET (without it s3fs asks for the size first, a second round trip)
        text = _ask(lambda: fs.cat_file(path, start=0), url, retry, stats)
    except (FileNotFoundError, NotADirectoryError):  # (a path under a local file)
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"'{url}' is not valid JSON ({err}).") from err
