"""The memory-mapped ``.npy`` files of :class:`~datarax.sources.npy.NpySource`'s fields:
each file opened and checked (a readable ``.npy`` array that a batch can carry), a field's
shards checked to agree on the per-record shape and dtype, records numbered across them
and gathered by index, a file cut short in place refused before its map is read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax.core.dtypes import fit_column, is_text_dtype
from datarax.core.errors import RecordError, SourceChangedError
from datarax.host.counts import count_words

__all__ = ["FieldShards", "narrow_name", "open_fields"]

_WHERE = "NpySource"


class FieldShards:
    """The memory-mapped files of one field, records numbered across them."""

    def __init__(self, field: str, files: tuple[str, ...], cast_float64: bool,
                 local: Sequence[str] | None = None) -> None:
        self.field = field
        self.files = files  # as the user named them (URLs for remote files)
        self.local = tuple(local or files)
        self.arrays = [_open(path, name) for path, name in zip(self.local, files)]
        # each mapped file as opened: (inode, bytes the map needs)
        self.opened = [_opened(path, array) for path, array in zip(self.local, self.arrays)]
        first = self.arrays[0]
        for path, array in zip(files, self.arrays):
            if array.ndim == 0:
                raise RecordError(
                    f"{_WHERE}: '{path}' holds a single value (shape ()); records lie along "
                    "axis 0, so a shard needs at least one dimension.",
                    path=path,
                )
            if array.shape[1:] != first.shape[1:] or _kind(array.dtype) != _kind(first.dtype):
                raise RecordError(
                    f"{_WHERE}: field '{field}': '{path}' holds records of "
                    f"{_describe(array)}, but '{files[0]}' holds {_describe(first)}; every "
                    "shard of a field must have the same per-record shape and dtype.",
                    path=path,
                )
        # float64 is refused up front (cast only with cast_float64=True); int64 values
        # are checked record by record in decode (narrowed when they fit).
        fit_column(
            field, np.zeros((0,), first.dtype), where=f"{_WHERE} file '{files[0]}'",
            cast_float64=cast_float64, drop_hint=f"save the shards as {narrow_name(first.dtype)}",
        )
        # served in native byte order; text as wide as the widest shard's strings
        self.dtype = np.result_type(*(_native(a.dtype) for a in self.arrays))
        self.row_shape = tuple(first.shape[1:])
        self.ends = np.cumsum([a.shape[0] for a in self.arrays]).astype(np.int64)
        self.starts = self.ends - np.asarray([a.shape[0] for a in self.arrays], np.int64)
        self.length = int(self.ends[-1])

    def gather(self, indices: np.ndarray) -> np.ndarray:
        """Rows at stable ``indices`` (one fancy-index read per file touched)."""
        out = np.empty((len(indices), *self.row_shape), self.dtype)
        file_of = np.searchsorted(self.ends, indices, side="right")
        for f in np.unique(file_of).tolist():
            self._check_unchanged(f)
            slots = np.flatnonzero(file_of == f)
            out[slots] = self.arrays[f][indices[slots] - self.starts[f]]
        return out

    def _check_unchanged(self, f: int) -> None:
        """Refuse to read file ``f``'s map once the file was cut short in place (a
        rewrite by ``numpy.save`` to the same path, say): a map read past a file's end
        kills the process (SIGBUS). A rewrite of the same size is read as the file now
        is; a file replaced by another (``os.replace``) or deleted is fine: the map keeps
        the version it opened."""
        inode, needs = self.opened[f]
        try:
            now = os.stat(self.local[f])
        except OSError:
            return
        if now.st_ino == inode and now.st_size < needs:
            raise SourceChangedError(
                f"{_WHERE}: '{self.files[f]}' was written over while the source reads it "
                f"(it is memory-mapped: {needs} bytes opened, {now.st_size} now). Write a "
                "new file beside it and os.replace() it over the old one (the source keeps "
                "reading the version it opened), or build a new source to read the new data.",
                path=self.files[f],
            )

    def locate(self, index: int) -> tuple[str, int]:
        f = int(np.searchsorted(self.ends, index, side="right"))
        return self.files[f], int(index - self.starts[f])


def _open(path: str, name: str | None = None) -> np.ndarray:
    """``path`` memory-mapped; ``name`` (default ``path``) names it in errors: the URL
    of a remote file read from its cached copy."""
    name = name or path
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - reported with the file name
        raise RecordError(
            f"{_WHERE}: '{name}' is not a readable .npy file ({_unreadable(path, err)}). "
            "Write each shard with numpy.save (one array per file, no object dtype).",
            path=name,
        ) from err
    if not isinstance(array, np.ndarray):  # an .npz archive
        keys = list(array.keys())
        array.close()
        raise RecordError(
            f"{_WHERE}: '{name}' is an .npz archive (arrays {keys}), not a .npy file. Save "
            "each array with numpy.save and pass paths={field: file}.",
            path=name,
        )
    if array.dtype.kind == "V":  # raw bytes (no fields) or a structured dtype
        raw = array.dtype.names is None
        raise RecordError(
            f"{_WHERE}: '{name}' holds {'raw bytes' if raw else 'a structured dtype'} "
            f"({array.dtype}), which a batch cannot carry. " + (
                _RAW_BYTES.format(size=count_words(array.dtype.itemsize, "byte")) if raw else
                "Save each column with numpy.save and pass paths={field: file}."),
            path=name,
        )
    return array


def _unreadable(path: str, err: Exception) -> str:
    """Why ``np.load`` could not map ``path``, from its header (numpy's words: unpickle it)."""
    fmt, numpy_words = np.lib.format, f"{type(err).__name__}: {err}"
    try:
        with open(path, "rb") as fh:
            one = fmt.read_magic(fh)[0] == 1
            header = fmt.read_array_header_1_0 if one else fmt.read_array_header_2_0
            shape, _, dtype = header(fh)
            data, needs = os.fstat(fh.fileno()).st_size - fh.tell(), np.prod(shape) * dtype.itemsize
    except ValueError:
        return "it does not start with the .npy header that numpy.save writes"
    except Exception:  # noqa: BLE001 - numpy's words
        return numpy_words
    if dtype.hasobject:
        return f"it holds Python objects (dtype {dtype}), which cannot be memory-mapped"
    if data < needs:
        return f"its header says {shape} {dtype}, {needs} bytes, but {data} follow: cut short?"
    return numpy_words


def _opened(path: str, array: np.ndarray) -> tuple[int, int]:
    """``path``'s inode and the bytes its map of ``array`` covers."""
    return os.stat(path).st_ino, int(getattr(array, "offset", 0)) + array.nbytes


#: what a bare void dtype (no fields) likely is, and what to do: numpy.save writes a
#: bfloat16 / float8 array (ml_dtypes, which .npy cannot name) as raw bytes
_RAW_BYTES = (
    "Raw values of {size} with no fields are most likely an ml_dtypes array "
    "(bfloat16 is |V2, float8 |V1) that numpy.save wrote as bytes: .npy cannot name its "
    "type. Save numpy.save(path, x.view(np.uint16)) (np.uint8 for float8) and turn the field "
    "back in a stage with jax.lax.bitcast_convert_type(value, jnp.bfloat16), or save "
    "x.astype(np.float32) (exact for bfloat16).")


def open_fields(fields: dict[str, tuple[str, ...]], local: dict[str, list[str]],
                 cast_float64: bool) -> list[FieldShards]:
    """Every field's shards, memory-mapped (remote ones from ``local`` copies),
    checked to hold the same number of records, at least one."""
    shards = [FieldShards(f, files, cast_float64, local.get(f)) for f, files in fields.items()]
    lengths = {s.field: s.length for s in shards}
    if len(set(lengths.values())) > 1:
        counts = ", ".join(f"'{s.field}' {s.length} ({', '.join(s.files)})" for s in shards)
        raise RecordError(
            f"{_WHERE}: the fields hold different numbers of records: {counts}; every "
            "field needs exactly one value per record."
        )
    if shards[0].length == 0:
        raise RecordError(
            f"{_WHERE}: the files {list(shards[0].files)} hold no records.",
            path=shards[0].files[0],
        )
    return shards


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=")


def _kind(dtype: np.dtype) -> Any:
    """What shards of one field must share: the dtype in native byte order, and for
    strings only their kind (``numpy.save`` gives each shard its own width)."""
    return dtype.kind if is_text_dtype(dtype) else _native(dtype)


def _describe(array: np.ndarray) -> str:
    return f"{_native(array.dtype)}{tuple(array.shape[1:])}"


def narrow_name(dtype: np.dtype) -> str:
    """The 32-bit type to save a 64-bit ``dtype`` as (for the error that refuses it)."""
    return {"i": "int32", "u": "int32", "f": "float32", "c": "complex64"}.get(dtype.kind, str(dtype))
