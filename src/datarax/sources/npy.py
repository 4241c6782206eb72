"""``NpySource``: records of memory-mapped ``.npy`` files, read by index on host threads.

The worked example of a :class:`~datarax.sources.RandomAccessSource`: it implements only
``__len__``, ``read_records`` (one gather per file), ``decode`` (the 64-bit rule of
:mod:`datarax.core.dtypes`) and ``locate``; the base gives shuffle, shards, threaded
read-ahead, exact resume and the bad-record policy.

Records lie along axis 0. One file or a list of shards makes one field (``field``); a
mapping ``{field: file or shards}`` one field per entry, all of the same record count.
A field's shards share the per-record shape and dtype (byte order aside; strings of any
width). A glob is expanded sorted by name (beside another field, files numbered without
zero padding are refused unless every field's are numbered alike). A URL's files are
fetched into the shard cache once, at build, and memory-mapped from there.

Example:
    >>> import numpy as np, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> np.save(os.path.join(folder, "a.npy"), np.arange(6, dtype=np.float32).reshape(3, 2))
    >>> np.save(os.path.join(folder, "b.npy"), np.arange(6, 10, dtype=np.float32).reshape(2, 2))
    >>> config = NpySourceConfig(paths=[os.path.join(folder, f) for f in ("a.npy", "b.npy")],
    ...                          field="x")
    >>> src = NpySource(config)
    >>> len(src), src.element_spec()["x"].shape
    (5, (2,))
    >>> src.get_batch(4)["x"][:, 0].tolist()
    [0.0, 2.0, 4.0, 6.0]
    >>> src.close()
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig, check_bool, check_seed
from datarax.core.dtypes import fit_value, is_64bit
from datarax.core.errors import ConfigError
from datarax.sources.npy_shards import narrow_name, open_fields
from datarax.sources.remote_files import RemoteFiles
from datarax.sources.random_access import BadRecordFields, RandomAccessSource
from datarax.sources.source_call import (
    MISSING, check_config_given, config_keyword, describe, source_config,
)
from datarax.storage import ShardCache, StorageStats, list_objects
from datarax.storage.local_glob import local_files
from datarax.storage.urls import all_remote, path_list

DEFAULT_FIELD = "data"
_WHERE = "NpySource"
_GLOB = re.compile(r"[*?\[]")
_CALL_FORMS = ("NpySource(NpySourceConfig(paths='x.npy')), NpySource(config=NpySourceConfig("
               "paths='x.npy')) or NpySource(paths='x.npy') (settings as keywords)")


@dataclass(frozen=True)
class NpySourceConfig(BadRecordFields, StructuralConfig):
    """Configuration of :class:`NpySource`.

    Attributes:
        paths: one ``.npy`` file, a list of shards, or a mapping ``{field: file or
            list of shards}``; stored as a tuple of paths, or of ``(field, paths)`` pairs.
        field: the field name of a single file or list (default ``"data"``); with a
            mapping the names come from its keys and ``field`` stays None.
        shuffle, seed: serve records in a Feistel permutation, new each epoch
            (``seed + epoch``); without ``shuffle``, in file order.
        num_epochs: passes that direct iteration makes; ``-1`` unbounded.
        cast_float64: cast float64 shards to float32 while ``jax_enable_x64`` is off
            (else they are refused; see :mod:`datarax.core.dtypes`).
        on_error, max_skipped, max_skipped_fraction: the bad-record policy, as in
            :class:`~datarax.sources.ArrayRecordSourceConfig`.

    Example:
        >>> NpySourceConfig(paths={"image": ["i0.npy", "i1.npy"], "label": "l.npy"}).paths
        (('image', ('i0.npy', 'i1.npy')), ('label', ('l.npy',)))
    """

    paths: Any = ()
    field: str | None = None
    shuffle: bool = False
    seed: int = 42
    num_epochs: int = 1
    cast_float64: bool = False
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "paths", _normalize_paths(self.paths, self.field))
        check_bool(self, "shuffle")
        check_seed(self, "seed")
        check_bool(self, "cast_float64")
        self.error_policy()

    def fields(self) -> dict[str, tuple[str, ...]]:
        """``{field: its files}``, in the order records and fields are served."""
        if self.paths and isinstance(self.paths[0], tuple):
            return dict(self.paths)
        return {self.field or DEFAULT_FIELD: self.paths}


def _example_path(value: Any) -> str:
    """``value`` when it is a path (passed where the config goes), else an example."""
    return os.fspath(value) if isinstance(value, (str, os.PathLike)) else "data.npy"


def _normalize_paths(paths: Any, field: str | None) -> Any:
    where = "NpySourceConfig.paths"
    if field is not None and not (isinstance(field, str) and field):
        raise ConfigError(f"NpySourceConfig.field must be a non-empty str or None, got {field!r}.")
    if isinstance(paths, tuple) and paths and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in paths
    ):
        paths = dict(paths)  # already normalized (e.g. config.replace)
    if isinstance(paths, Mapping):
        if field is not None:
            raise ConfigError(
                "NpySourceConfig: with a mapping of paths the field names are its keys; "
                f"leave field unset (got field={field!r})."
            )
        if not paths:
            raise ConfigError(f"{where} is an empty mapping; name at least one field.")
        pairs = []
        for name, value in paths.items():
            if not (isinstance(name, str) and name):
                raise ConfigError(f"{where} keys must be field names (str), got {name!r}.")
            pairs.append((name, tuple(path_list(value, f"{where}[{name!r}]"))))
        return tuple(pairs)
    if isinstance(paths, Sequence) and not isinstance(paths, (str, bytes)) and not paths:
        raise ConfigError(
            f"{where} is empty; name a .npy file, a list of shards or a mapping "
            "{field: files}."
        )
    return tuple(path_list(paths, where))


def _number_key(path: str) -> tuple[tuple[int, Any], ...]:
    """A file name's sort key with its numbers compared as numbers (``x-2`` < ``x-10``)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", name) if part)


def _check_glob_order(named: dict[str, tuple[str, ...]], fields: dict[str, tuple[str, ...]]) -> None:
    """Refuse a glob whose sorted files are not in the order of their numbers
    (``x-10.npy`` before ``x-2.npy``) beside a field laid out otherwise: records are
    numbered across files, so the fields' records would not line up."""
    if len(fields) < 2:
        return
    orders = {
        name: tuple(sorted(range(len(files)), key=lambda i: _number_key(files[i])))
        for name, files in fields.items()
    }
    for name, order in orders.items():
        if order == tuple(range(len(order))) or not any(_GLOB.search(p) for p in named[name]):
            continue
        other = next((o for o in orders if orders[o] != order), None)
        if other is None:
            return  # every field's files are numbered alike: they line up
        files = fields[name]
        later = next(j for j in range(len(files))
                     if any(_number_key(files[i]) > _number_key(files[j]) for i in range(j)))
        earlier = next(i for i in range(later) if _number_key(files[i]) > _number_key(files[later]))
        base = [files[k].rstrip("/").rsplit("/", 1)[-1] for k in (earlier, later)]
        pattern = next(p for p in named[name] if _GLOB.search(p))
        padded = re.sub(r"\d+", lambda m: m.group().zfill(len(m.group()) + 1), base[1], count=1)
        raise ConfigError(
            f"{_WHERE}: field '{name}': the glob pattern '{pattern}' matches files numbered "
            f"without zero padding, taken in sorted name order ('{base[0]}' before "
            f"'{base[1]}'), while field '{other}' is laid out otherwise, so its records "
            f"would not line up with them. Zero-pad the numbers in the file names "
            f"({padded}), or list the files in order."
        )


def _remote_fields(
    fields: dict[str, tuple[str, ...]],
    cache: ShardCache | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[dict[str, tuple[str, ...]], dict[str, list[str]], RemoteFiles | None]:
    """For fields named by URLs: their files listed (globs expanded), every file
    fetched into the shard cache and held. Returns ``{field: file URLs}``,
    ``{field: local paths}`` (empty for local fields) and the held files."""
    listed: dict[str, list[Any]] = {}
    stats = StorageStats()  # the listing's retries, then the downloads'
    for name, files in fields.items():
        if all_remote(files, f"{_WHERE}: field '{name}'"):
            listed[name] = list_objects(files, storage_options, stats=stats)
        else:
            fields = {**fields, name: tuple(local_files(files, f"{_WHERE}: field '{name}'"))}
    if not listed:
        return fields, {}, None
    objects = [o for field in listed.values() for o in field]
    held = RemoteFiles(objects, where=_WHERE, cache=cache, storage_options=storage_options,
                       stats=stats)
    paths = iter(held.local_paths())
    local = {name: [next(paths) for _ in objs] for name, objs in listed.items()}
    names = {name: tuple(o.url for o in listed[name]) if name in listed else files
             for name, files in fields.items()}
    return names, local, held


class NpySource(RandomAccessSource):
    """Records of memory-mapped ``.npy`` shards; a host source (see the module docstring).

    Args:
        config: an :class:`NpySourceConfig`.
        num_threads, read_ahead: reader threads; batches read ahead of the consumer.
        cache: for URLs, the :class:`~datarax.storage.ShardCache` (folder and size limit;
            default ``DATARAX_CACHE_DIR`` / ``DATARAX_CACHE_BYTES``). Every file is held
            in it while the source is open, so they must fit together.
        storage_options: for URLs, options of the fsspec filesystem (credentials and
            endpoints are otherwise read as the filesystem reads them, e.g. ``AWS_*``).

    Raises:
        RecordError: a file is missing or not a ``.npy`` array, shards of a field
            disagree on the per-record shape or dtype (naming the file), or the fields
            hold different numbers of records. A missing remote file is named by URL.
        ConfigError: a float64 shard without ``cast_float64=True`` (x64 off), or a glob
            of files numbered without zero padding beside a field laid out otherwise.
        MissingExtraError: a URL's filesystem is not installed (``datarax[remote]``).
        CacheFullError: the remote files do not fit the shard cache together.
    """

    config: NpySourceConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    config_class = NpySourceConfig

    def __init__(
        self,
        config: NpySourceConfig = MISSING,
        /,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        num_threads: int = 4,
        read_ahead: int | None = None,
        cache: ShardCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        # config positional-only: config= or more arguments reach config_keyword's ConfigError
        config = config_keyword("NpySource", config, MISSING, extra, settings, data_name=None,
                                forms=_CALL_FORMS)
        config = source_config(type(self), config, settings)
        check_config_given("NpySource", config, NpySourceConfig,
                           "NpySource(NpySourceConfig(paths='x.npy')) or NpySource(paths='x.npy')")
        if not isinstance(config, NpySourceConfig):
            raise ConfigError(
                f"NpySource needs an NpySourceConfig, got {describe(config)}; its files go in the "
                f"config. Call NpySource(NpySourceConfig(paths={_example_path(config)!r})).")
        super().__init__(config, rngs=rngs, name=name, num_threads=num_threads, read_ahead=read_ahead)
        fields, local, remote = _remote_fields(config.fields(), cache, storage_options)
        self._remote = nnx.static(remote)
        try:
            _check_glob_order(config.fields(), fields)
            shards = open_fields(fields, local, config.cast_float64)
        except BaseException:
            if remote is not None:
                remote.release()
            raise
        self._shards = nnx.static(tuple(shards))
        self._wide = nnx.static(tuple(s.field for s in shards if is_64bit(s.dtype)))
        self._length = shards[0].length

    # ------------------------------------------------------------------ hooks
    def __len__(self) -> int:
        return self._length

    def read_records(self, indices: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """The records at stable ``indices``: one gather per field and file."""
        keys = np.asarray(indices, np.int64)
        if keys.size and (keys.min() < 0 or keys.max() >= self._length):
            raise IndexError(f"record indices must be in [0, {self._length}), got {indices}")
        columns = {s.field: s.gather(keys) for s in self._shards}
        return [{name: column[j] for name, column in columns.items()} for j in range(len(keys))]

    def decode(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """64-bit fields narrowed when the value fits: int64 to int32, float64 to float32
        with ``cast_float64`` (else refused, naming the 32-bit type to save)."""
        for name in self._wide:
            value = raw[name]
            raw[name] = fit_value(
                name, value, cast_float64=self.config.cast_float64,
                drop_hint=f"save the shards as {narrow_name(value.dtype)}",
            )
        return raw

    def locate(self, index: int) -> tuple[str, int]:
        """``(file, row in file)`` of stable record ``index``: in the file of the first
        64-bit integer field (the values ``decode`` checks, so a value past int32 is
        named where it lies), else of the first field."""
        wide = [s for s in self._shards if s.field in self._wide]
        return (wide or self._shards)[0].locate(int(index))

    def stats(self) -> dict[str, Any] | None:
        """The reader's timers, and for URLs ``"storage"``: downloads, cache hits,
        retries ... (:meth:`datarax.storage.RemoteShards.stats`)."""
        out = super().stats()
        if self._remote is None:
            return out
        return {**(out or {}), "storage": self._remote.stats()}

    def close(self) -> None:
        """Stop the reader threads and let the shard cache evict the remote files
        (open memory maps stay readable)."""
        super().close()
        if self._remote is not None:
            self._remote.release()

    # ------------------------------------------------------------ description
    @property
    def paths(self) -> dict[str, list[str]]:
        """``{field: its files}`` (URLs for remote files, globs expanded), in
        record-numbering order."""
        return {s.field: list(s.files) for s in self._shards}
