"""The bytes of an ArrayRecord file: block headers, chunks, the postscript and the footer.

Built from two public documents only: riegeli's *Riegeli/records file format
specification* (``doc/riegeli_records_file_format.md``) and array_record's
``cpp/layout.proto``. The facts used (numbers little-endian):

* The file is cut into 64 KiB blocks; each block begins with a 24-byte block header, which
  interrupts whatever chunk runs across the block boundary (even its chunk header).
* A chunk is a 40-byte header (``header_hash``, ``data_size``, ``data_hash``: 8 bytes each;
  ``chunk_type``: 1 byte; ``num_records``: 7 bytes; ``decoded_data_size``: 8 bytes), then
  ``data_size`` bytes of data (block headers not counted), then padding.
* A simple chunk (type ``'r'``) holds a compression byte (0 none, ``'z'`` zstd, ``'b'``
  brotli, ``'s'`` snappy), a varint with the size of the compressed record sizes, those
  sizes (``num_records`` varints once decompressed), then the compressed record values
  (``decoded_data_size`` bytes once decompressed). A compressed buffer starts with its
  decompressed size (a varint). Type ``'t'`` is a transposed chunk (not documented).
* ArrayRecord puts a postscript chunk in the file's last 64 KiB block (at ``file_size -
  65536``): a simple chunk whose records are ``RiegeliPostscript{footer_offset = 1,
  magic = 2}`` (three copies). The footer chunk at ``footer_offset`` is a simple chunk of
  ``RiegeliFooterMetadata{array_record_metadata = 1: {version = 1, num_chunks = 2,
  num_records = 3}}``, then one ``ArrayRecordFooter{chunk_offset = 1, decoded_data_size =
  2, num_records = 3}`` per data chunk, in record order. The three messages are read here
  from the protobuf wire format (no protobuf dependency).

Hashes (HighwayHash) are not checked; the chunk headers are checked against the footer.

Example:
    >>> block = bytes(24) + b"abc"  # a block header, then the first bytes of a chunk
    >>> logical_bytes(block, 0)
    b'abc'
    >>> proto_fields(bytes([0x08, 0x96, 0x01, 0x10, 0x03]))
    {1: [150], 2: [3]}
"""

from __future__ import annotations

import dataclasses
import json
import struct
import threading
from collections.abc import Callable

import numpy as np

from datarax.errors import ConfigError, RecordError
from datarax.extras import require

__all__ = ["BLOCK", "BLOCK_HEADER", "CHUNK_HEADER", "POSTSCRIPT", "ChunkHeader", "Footer",
           "chunk_header", "logical_bytes", "parse_footer", "parse_postscript", "proto_fields",
           "simple_chunk_parts", "simple_chunk_records", "varints"]

BLOCK = 1 << 16
BLOCK_HEADER = 24
CHUNK_HEADER = 40
POSTSCRIPT = BLOCK  # the postscript chunk fills the last block of the file
_SIMPLE, _TRANSPOSED = ord("r"), ord("t")
_NAMES = {0: "uncompressed", ord("z"): "zstd", ord("b"): "brotli", ord("s"): "snappy"}
_ZSTD = threading.local()  # each thread's zstd decompression context


def logical_bytes(data: bytes | memoryview, start: int) -> bytes:
    """``data`` (the file's bytes from offset ``start``) without the block headers in it."""
    view = memoryview(data)
    pieces = []
    pos, end = start, start + len(view)
    while pos < end:
        in_block = pos % BLOCK
        if in_block < BLOCK_HEADER:  # inside a block header: skip to its end
            pos += BLOCK_HEADER - in_block
            continue
        stop = min(end, pos - in_block + BLOCK)
        pieces.append(view[pos - start:stop - start])
        pos = stop
    return b"".join(pieces)


def file_span(start: int, size: int) -> int:
    """Bytes of file from ``start`` (not inside a block header) holding ``size`` logical
    bytes, with the block headers in between."""
    pos, left = start, size
    while left > 0:
        in_block = pos % BLOCK
        if in_block < BLOCK_HEADER:
            pos += BLOCK_HEADER - in_block
            continue
        take = min(left, BLOCK - in_block)
        pos, left = pos + take, left - take
    return pos - start


def varint(buf: bytes | memoryview, pos: int, where: str) -> tuple[int, int]:
    """The varint at ``buf[pos:]`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise RecordError(f"{where}: a varint runs past its buffer (the file is damaged).")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def proto_fields(buf: bytes | memoryview, where: str = "a protobuf message") -> dict[int, list]:
    """Field number -> values of a protobuf message on the wire (varints as ints,
    length-delimited fields as bytes; fixed-width fields as ints)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos, where)
        elif wire == 2:
            length, pos = varint(buf, pos, where)
            value, pos = bytes(buf[pos:pos + length]), pos + length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = int.from_bytes(buf[pos:pos + width], "little"), pos + width
        else:
            raise RecordError(f"{where}: wire type {wire} is not one a message of this file "
                              "uses (the file is damaged or not an ArrayRecord file).")
        if pos > len(buf):
            raise RecordError(f"{where}: a field runs past the message (the file is damaged).")
        out.setdefault(number, []).append(value)
    return out


@dataclasses.dataclass(frozen=True)
class ChunkHeader:
    """The fields of a chunk header that decoding uses."""

    data_size: int
    chunk_type: int
    num_records: int
    decoded_data_size: int


def chunk_header(buf: bytes) -> ChunkHeader:
    """The header in the first 40 logical bytes of a chunk."""
    _, data_size, _, type_and_count, decoded = struct.unpack_from("<QQQQQ", buf)
    return ChunkHeader(data_size, type_and_count & 0xFF, type_and_count >> 8, decoded)


def refuse_type(chunk_type: int, where: str) -> None:
    """Refuse a chunk that ranged reads cannot decode (anything but a simple chunk)."""
    if chunk_type == _TRANSPOSED:
        raise ConfigError(
            f"{where} holds transposed chunks (written with the ArrayRecordWriter option "
            "'transpose'), which ranged reads cannot decode. Read it whole (download the file), "
            "or write the data again without 'transpose'.")
    if chunk_type != _SIMPLE:
        raise RecordError(f"{where}: a data chunk of type {chunk_type:#04x}, not a simple "
                          "chunk ('r'); the file is damaged or not an ArrayRecord file.")


def decompressor(compression: int, where: str) -> Callable[[bytes, int], bytes]:
    """``f(buffer, size)``: the decompressed ``size`` bytes of a buffer of this compression
    (its size prefix already removed)."""
    if compression == 0:
        return lambda buf, size: bytes(buf)
    if compression == ord("z"):
        zstandard = require("zstandard", extra="remote", user=f"reading {where}")

        def zstd(buf: bytes, size: int) -> bytes:
            # one decompression context a thread, made once (a fresh one costs more than
            # decompressing a small record)
            context = getattr(_ZSTD, "context", None)
            if context is None:
                context = _ZSTD.context = zstandard.ZstdDecompressor()
            return context.decompress(buf, max_output_size=max(size, 1))[:size]

        return zstd
    name = _NAMES.get(compression)
    if name is None:
        raise RecordError(f"{where}: compression byte {compression:#04x} is none the riegeli "
                          "format defines; the file is damaged or not an ArrayRecord file.")
    raise ConfigError(
        f"{where} is compressed with {name} (the ArrayRecordWriter option '{name}'), which "
        "ranged reads cannot decode: they read zstd and uncompressed chunks. Read it whole "
        "(download the file), or write the data again with 'zstd' or 'uncompressed'.")


def _buffer(data: bytes, size: int, decompress: Callable[[bytes, int], bytes], compressed: bool,
            where: str) -> bytes:
    """A buffer of a simple chunk, decompressed (``size``: its decompressed size)."""
    if not compressed:
        return data
    stated, pos = varint(data, 0, where)
    if stated != size and size >= 0:
        raise RecordError(f"{where}: a buffer says it holds {stated} bytes, the chunk header "
                          f"{size}; the file is damaged.")
    out = decompress(data[pos:], stated)
    if len(out) != stated:
        raise RecordError(f"{where}: a buffer decompressed to {len(out)} bytes, not {stated}; "
                          "the file is damaged.")
    return out


def simple_chunk_parts(chunk: bytes, where: str) -> tuple[np.ndarray, bytes]:
    """The record sizes and the values (the records end to end) of a simple chunk
    (``chunk``: its logical bytes, header first)."""
    if len(chunk) < CHUNK_HEADER:
        raise RecordError(f"{where}: a chunk is cut short (the file is damaged or truncated).")
    header = chunk_header(chunk)
    refuse_type(header.chunk_type, where)
    data = chunk[CHUNK_HEADER:CHUNK_HEADER + header.data_size]
    if len(data) != header.data_size or not data:
        raise RecordError(f"{where}: a chunk is cut short (the file is damaged or truncated).")
    compression = data[0]
    decompress = decompressor(compression, where)
    sizes_size, pos = varint(data, 1, where)
    raw_sizes = data[pos:pos + sizes_size]
    # the sizes' decompressed length is not stated elsewhere: take it from the prefix
    sizes_buf = _buffer(raw_sizes, -1, decompress, compression != 0, where)
    values = _buffer(data[pos + sizes_size:], header.decoded_data_size, decompress,
                     compression != 0, where)
    sizes = varints(sizes_buf, header.num_records, where)
    if int(sizes.sum()) != len(values):
        raise RecordError(f"{where}: the record sizes of a chunk do not add up to its values "
                          "(the file is damaged).")
    return sizes, values


def simple_chunk_records(chunk: bytes, where: str) -> list[bytes]:
    """The records of a simple chunk (``chunk``: its logical bytes, header first)."""
    sizes, values = simple_chunk_parts(chunk, where)
    ends = np.cumsum(sizes).tolist()
    return [values[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def varints(buf: bytes, count: int, where: str) -> np.ndarray:
    """The ``count`` varints that fill ``buf`` exactly (many: decoded at once with numpy)."""
    if count <= 8:  # a chunk of a few records: numpy's set-up would cost more
        out, at = [], 0
        for _ in range(count):
            value, at = varint(buf, at, where)
            out.append(value)
        if at != len(buf):
            raise RecordError(f"{where}: the record sizes of a chunk do not add up to its "
                              "values (the file is damaged).")
        return np.asarray(out, np.int64)
    arr = np.frombuffer(buf, np.uint8)
    decoded = varint_values(arr, max_bytes=9)  # at most 63 bits
    if decoded is None:
        if len(arr) and arr[-1] < 0x80:
            raise RecordError(f"{where}: a varint runs past 63 bits (the file is damaged).")
        if count or len(arr):
            raise RecordError(f"{where}: the record sizes of a chunk do not add up to its "
                              "values (the file is damaged).")
        return np.zeros(0, np.int64)
    if len(decoded[0]) != count:
        raise RecordError(f"{where}: the record sizes of a chunk do not add up to its values "
                          "(the file is damaged).")
    return decoded[0]


def varint_values(buf: np.ndarray, max_bytes: int = 10) -> tuple[np.ndarray, np.ndarray] | None:
    """The values of the varints that fill ``buf`` (bytes as ``uint8``) end to end, and the
    position of each one's last byte; None when ``buf`` is empty, ends inside a varint, or
    holds one longer than ``max_bytes``.

    Example:
        >>> values, ends = varint_values(np.frombuffer(bytes([0x96, 0x01, 0x03]), np.uint8))
        >>> values.tolist(), ends.tolist()
        ([150, 3], [1, 2])
    """
    ends = np.flatnonzero(buf < 0x80)  # the last byte of each varint
    if not len(ends) or ends[-1] != len(buf) - 1:
        return None
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    extra = ends - starts  # bytes after each varint's first
    width = int(extra.max()) + 1
    if width > max_bytes:
        return None
    values = (buf[starts] & 0x7F).astype(np.uint64)
    for place in range(1, width):
        part = (buf[np.minimum(starts + place, ends)] & 0x7F).astype(np.uint64)
        part[extra < place] = 0  # past this varint's end
        values |= part << np.uint64(7 * place)
    return values.astype(np.int64), ends


def parse_postscript(block: bytes, where: str) -> int:
    """``footer_offset`` from the file's last block (``block``: its 65,536 bytes)."""
    records = simple_chunk_records(logical_bytes(block, 0), f"{where} (its postscript)")
    offsets = set()
    for record in records:
        fields = proto_fields(record, f"{where} (its postscript)")
        if 1 not in fields or 2 not in fields:
            raise RecordError(f"{where}: its postscript has no footer offset and magic; it is "
                              "not an ArrayRecord file.")
        offsets.add(fields[1][-1])
    if len(offsets) != 1:
        raise RecordError(f"{where}: the copies of its postscript disagree (the file is "
                          "damaged).")
    return offsets.pop()


@dataclasses.dataclass(frozen=True, eq=False)
class Footer:
    """Where an ArrayRecord file's data chunks are: ``offsets[i]`` the file offset of chunk
    ``i``, ``counts[i]`` its records, ``decoded[i]`` their bytes; the footer chunk at
    ``footer_offset`` ends the data; ``compression`` the file's (its footer chunk's)."""

    size: int
    footer_offset: int
    compression: int
    offsets: np.ndarray
    counts: np.ndarray
    decoded: np.ndarray

    @property
    def num_records(self) -> int:
        return int(self.counts.sum())

    @property
    def firsts(self) -> np.ndarray:
        """The first record of each chunk (and the record count last)."""
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    def end(self, chunk: int) -> int:
        """Where chunk ``chunk``'s bytes end (the next chunk, or the footer)."""
        return int(self.offsets[chunk + 1]) if chunk + 1 < len(self.offsets) else self.footer_offset

    def to_bytes(self) -> bytes:
        """A compact encoding (:meth:`from_bytes` reads it back)."""
        head = json.dumps({"v": 1, "size": self.size, "footer_offset": self.footer_offset,
                           "compression": self.compression, "chunks": len(self.offsets)})
        arrays = np.stack([self.offsets, self.counts, self.decoded]).astype("<u8")
        return head.encode() + b"\n" + arrays.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Footer:
        head, _, rest = data.partition(b"\n")
        meta = json.loads(head)
        n = int(meta["chunks"])
        if meta.get("v") != 1 or len(rest) != 24 * n:
            raise ValueError("not a footer of this version")
        arrays = np.frombuffer(rest, "<u8").reshape(3, n).astype(np.int64)
        return cls(int(meta["size"]), int(meta["footer_offset"]), int(meta["compression"]),
                   arrays[0], arrays[1], arrays[2])


def parse_footer(chunk: bytes, size: int, footer_offset: int, where: str) -> Footer:
    """The :class:`Footer` from the footer chunk's logical bytes."""
    compression = chunk[CHUNK_HEADER] if len(chunk) > CHUNK_HEADER else 0
    decompressor(compression, where)  # the writer's compression: refused by the file's name
    sizes, values = simple_chunk_parts(chunk, f"{where} (its footer)")
    if not len(sizes):
        raise RecordError(f"{where}: its footer holds no metadata; not an ArrayRecord file.")
    head = int(sizes[0])
    meta = proto_fields(values[:head], f"{where} (its footer)")
    inner = proto_fields(meta.get(1, [b""])[-1], f"{where} (its footer)")
    chunks = inner.get(2, [0])[-1]
    total = inner.get(3, [0])[-1]
    if len(sizes) - 1 != chunks:
        raise RecordError(f"{where}: its footer lists {len(sizes) - 1} chunks, its metadata "
                          f"says {chunks} (the file is damaged).")
    table = footer_table(values[head:], sizes[1:])
    if table is None:  # a field not a varint: read message by message
        ends = np.cumsum(sizes).tolist()
        rows = [proto_fields(values[a:b], f"{where} (its footer)")
                for a, b in zip(ends[:-1], ends[1:], strict=True)]
        table = np.array([[r.get(k, [0])[-1] for k in (1, 3, 2)] for r in rows],
                         dtype=np.int64).reshape(-1, 3)
    offsets, counts, decoded = table[:, 0], table[:, 1], table[:, 2]
    if int(counts.sum()) != total or (len(offsets) and (
            np.any(np.diff(offsets) <= 0) or offsets[-1] >= footer_offset or offsets[0] < 0)):
        raise RecordError(f"{where}: its footer's chunk offsets or record counts are "
                          "inconsistent (the file is damaged).")
    return Footer(size, footer_offset, int(compression), offsets, counts, decoded)


def footer_table(messages: bytes, lengths: np.ndarray) -> np.ndarray | None:
    """``(chunk_offset, num_records, decoded_data_size)`` of each ``ArrayRecordFooter``
    message (``messages``: end to end, of ``lengths`` bytes each), decoded at once; None
    when a field is not a varint (read them with :func:`proto_fields` then)."""
    lengths = np.asarray(lengths, np.int64)
    table = np.zeros((len(lengths), 3), np.int64)
    buf = np.frombuffer(messages, np.uint8)
    if not len(buf):
        return table
    bounds = np.cumsum(lengths)  # where each message ends
    if np.any(buf[bounds[lengths > 0] - 1] >= 0x80):  # a message ends inside a varint
        return None
    decoded = varint_values(buf)
    if decoded is None:
        return None
    values, ends = decoded
    per = np.diff(np.searchsorted(ends, bounds), prepend=0)  # varints in each message
    # every field a varint: each message is (key, value) pairs, so the keys are the even
    # varints; the first field of another wire type shows as a key of that type
    if np.any(per & 1):
        return None
    keys, vals = values[0::2], values[1::2]
    if np.any(keys & 7):
        return None
    if (per == 6).all() and (keys.reshape(-1, 3) == (1 << 3, 2 << 3, 3 << 3)).all():
        return vals.reshape(-1, 3)[:, [0, 2, 1]]  # the writer's layout: fields 1, 2, 3
    message = np.repeat(np.arange(len(lengths)), per // 2)
    for column, number in enumerate((1, 3, 2)):  # chunk_offset, num_records, decoded size
        hit = (keys >> 3) == number
        table[message[hit], column] = vals[hit]  # a repeated field: its last value
    return table
