"""``ArrayRecordRanges``: records of ArrayRecord files read by byte range match
``ArrayRecordReader``'s, cost what a record's chunk costs, and refuse what they cannot read."""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pytest

from datarax.core.errors import ConfigError, RecordError

pytest.importorskip("array_record")
pytest.importorskip("zstandard")

from array_record.python.array_record_module import ArrayRecordReader  # noqa: E402
from int_record_files import write_records  # noqa: E402

from datarax.storage.array_record_layout import BLOCK  # noqa: E402
from datarax.storage.array_record_ranges import ArrayRecordRanges, MoreToRead, load_footer  # noqa: E402

if TYPE_CHECKING:
    from tests.storage.conftest import S3

SIZES = [0, 0, 7, 300, 3000, 40_000, 200_000]


def mixed_records(n: int, seed: int, last: int = 200_000) -> list[bytes]:
    """Records of 0 B to 200 KB, half random bytes (incompressible), half zeros."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = last if i == n - 1 else rng.choice(SIZES)
        out.append(rng.randbytes(size // 2) + bytes(size - size // 2))
    return out


def stock(path: str) -> list[bytes]:
    reader = ArrayRecordReader(path)
    try:
        return reader.read(list(range(reader.num_records())))
    finally:
        reader.close()


def file_reader(path: str) -> Callable[[int, int], bytes]:
    def read_range(offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)
    return read_range


def opened(path: str, **kwargs: object) -> ArrayRecordRanges:
    return ArrayRecordRanges(file_reader(path), os.path.getsize(path), name=path, **kwargs)


@pytest.mark.parametrize("group", [1, 7, 64])
@pytest.mark.parametrize("compression", ["zstd", "uncompressed"])
def test_every_record_equals_the_stock_readers(tmp_path: pathlib.Path, group: int,
                                               compression: str) -> None:
    records = mixed_records(260, seed=group)
    path = write_records(tmp_path / "a.array_record", records, f"group_size:{group},{compression}")
    ranges = opened(path)
    footer = ranges.footer
    straddling = [c for c in range(len(footer.offsets))
                  if int(footer.offsets[c]) // BLOCK != (footer.end(c) - 1) // BLOCK]
    assert len(straddling) >= min(5, len(footer.offsets) - 1)  # chunks across 64 KiB blocks
    assert len(footer.offsets) == -(-len(records) // group)
    expected = stock(path)
    assert expected == records
    assert len(ranges) == len(records)
    assert ranges.read(range(len(records))) == expected
    rng = np.random.default_rng(group)
    picks = rng.integers(0, len(records), 90)
    assert ranges.read(picks) == [expected[i] for i in picks]  # any order, repeats
    assert ranges.read([]) == []


def test_one_small_record_costs_its_chunk_not_the_file(tmp_path: pathlib.Path) -> None:
    rng = random.Random(3)
    records = [rng.randbytes(3072) for _ in range(2000)]  # 6 MB of incompressible records
    path = write_records(tmp_path / "small.array_record", records)
    ranges = opened(path)
    opening = ranges.stats()
    footer = ranges.footer
    assert footer.size - BLOCK - footer.footer_offset < 64 << 10  # in the default tail
    assert opening == {"requests": 1, "bytes": BLOCK + (64 << 10)}
    # a footer longer than the tail: a second request for the rest of it
    longer = opened(path, tail=4096)
    assert longer.stats()["requests"] == 2
    assert longer.stats()["bytes"] < BLOCK + 64 << 10
    assert longer.read([5]) == [records[5]]
    # from a first answer fetched by the caller: the second request refused when asked to
    start, length = ArrayRecordRanges.open_span(footer.size, tail=4096)
    first = file_reader(path)(start, length)
    with pytest.raises(MoreToRead, match=r"opening needs bytes \d+-\d+"):
        opened(path, tail=4096, first=first, more=False)
    assert opened(path, tail=4096, first=first).read([7]) == [records[7]]
    assert opened(path, first=file_reader(path)(*ArrayRecordRanges.open_span(footer.size)),
                  more=False).read([8]) == [records[8]]  # all in the first answer
    assert ranges.read([1234]) == [records[1234]]
    after = ranges.stats()
    assert after["requests"] - opening["requests"] == 1
    cost = after["bytes"] - opening["bytes"]
    assert cost == ranges.footer.end(1234) - int(ranges.footer.offsets[1234])
    assert 3072 < cost < 3072 + 200
    # neighbouring chunks in one request; others each in their own
    before = after
    assert ranges.read([10, 11, 12, 500]) == [records[i] for i in (10, 11, 12, 500)]
    assert ranges.stats()["requests"] - before["requests"] == 2


def test_a_footer_within_the_tail_opens_with_one_request(tmp_path: pathlib.Path) -> None:
    path = write_records(tmp_path / "tiny.array_record", [b"x" * i for i in range(50)],
                         "group_size:4")
    ranges = opened(path)
    assert ranges.stats()["requests"] == 1
    assert ranges.read([49, 0]) == [b"x" * 49, b""]
    empty = opened(write_records(tmp_path / "empty.array_record", []))
    assert len(empty) == 0 and empty.read([]) == []


@pytest.mark.parametrize("option, named", [
    ("group_size:2,transpose", "'transpose'"),
    ("group_size:2,brotli", "'brotli'"),
    ("group_size:2,snappy", "'snappy'"),
])
def test_options_it_cannot_decode_are_refused_at_open_by_name(tmp_path: pathlib.Path, option: str,
                                                              named: str) -> None:
    path = write_records(tmp_path / "x.array_record", mixed_records(20, seed=1, last=10), option)
    with pytest.raises(ConfigError, match=named) as info:
        opened(path)
    assert "x.array_record" in str(info.value) and "ranged reads cannot decode" in str(info.value)


def test_a_file_that_is_not_array_record_is_a_record_error(tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk.array_record"
    junk.write_bytes(random.Random(0).randbytes(3 * BLOCK))  # the same junk every run
    with pytest.raises(RecordError, match="junk.array_record"):
        opened(str(junk))
    short = tmp_path / "short.array_record"
    short.write_bytes(b"abc")
    with pytest.raises(RecordError, match="holds 3 bytes.*64 KiB blocks"):
        opened(str(short))
    good = write_records(tmp_path / "good.array_record", mixed_records(40, seed=2))
    whole = open(good, "rb").read()
    ranges = ArrayRecordRanges(lambda o, n: whole[o:o + n][: n - 1], len(whole), name=good,
                               footer=opened(good).footer)
    with pytest.raises(RecordError, match="returned .* bytes; the file is shorter"):
        ranges.read([3])


def test_fsspec_local_paths_and_urls(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("fsspec")
    records = mixed_records(120, seed=5, last=100)
    path = write_records(tmp_path / "f.array_record", records, "group_size:7")
    for url in (path, "file://" + path):
        ranges = ArrayRecordRanges.from_url(url)
        assert ranges.stats()["requests"] == 1 + 1  # its size, then the tail
        assert ranges.read([119, 0, 60]) == [records[119], records[0], records[60]]
    sized = ArrayRecordRanges.from_url(path, size=os.path.getsize(path))
    assert sized.stats()["requests"] == 1


def test_reads_from_s3_count_requests_and_keep_footers_beside_the_cache(
        s3: S3, tmp_path: pathlib.Path) -> None:
    from datarax.storage import ShardCache, list_objects

    local = tmp_path / "local"
    local.mkdir()
    wanted = {}
    for f, (options, n) in enumerate([("group_size:1", 150), ("group_size:64,uncompressed", 300)]):
        records = mixed_records(n, seed=10 + f)
        write_records(local / f"part-{f}.array_record", records, options)
        wanted[f"part-{f}.array_record"] = records
    url = s3.upload_folder(local, "ds")
    objects = list_objects(url + "/*.array_record")
    cache = ShardCache(tmp_path / "cache", max_bytes="1M")
    for obj in objects:
        records = wanted[obj.name]
        before = s3.proxy.count("GET", obj.name)
        ranges = ArrayRecordRanges.for_object(obj, cache=cache)
        assert s3.proxy.count("GET", obj.name) - before == ranges.stats()["requests"] <= 2
        picks = [0, len(records) - 1, len(records) // 2, len(records) // 2 + 1]
        assert ranges.read(picks) == [records[i] for i in picks]
        assert s3.proxy.count("GET", obj.name) - before == ranges.stats()["requests"]
        assert load_footer(cache, obj) is not None
        # a restart: the footer comes from beside the cache, no request to open
        again = ArrayRecordRanges.for_object(obj, cache=cache)
        assert again.stats() == {"requests": 0, "bytes": 0}
        seen = s3.proxy.count("GET", obj.name)
        assert again.read([7]) == [records[7]]
        assert s3.proxy.count("GET", obj.name) - seen == 1
    assert cache.usage() == 0  # footers only: no shard was downloaded


def test_footer_messages_decoded_at_once_equal_those_read_one_by_one() -> None:
    from datarax.storage.array_record_layout import footer_table, proto_fields

    def footer_rows(records: list[bytes]) -> np.ndarray | None:  # the messages end to end
        return footer_table(b"".join(records), np.asarray([len(r) for r in records], np.int64))

    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                return bytes(out)

    rng = random.Random(2)
    messages = []
    for _ in range(500):  # fields in any order, some missing, values up to 2**40
        fields = [(n, rng.randrange(1 << rng.choice([3, 14, 40]))) for n in (1, 2, 3)
                  if rng.random() < 0.9]
        rng.shuffle(fields)
        messages.append(b"".join(varint(n << 3) + varint(v) for n, v in fields))
    expected = [[proto_fields(m).get(k, [0])[-1] for k in (1, 3, 2)] for m in messages]
    assert footer_rows(messages).tolist() == expected
    # a length-delimited field, or a message cut inside a varint: read one by one instead
    assert footer_rows([varint(1 << 3) + b"\x05", varint(4 << 3 | 2) + b"\x01x"]) is None
    assert footer_rows([varint(1 << 3) + b"\x85"]) is None


def test_bytes_fetched_by_the_caller_decode_as_the_readers_own(tmp_path: pathlib.Path) -> None:
    records = mixed_records(120, seed=5, last=300)  # its last chunk in the open's bytes
    path = write_records(tmp_path / "c.array_record", records, "group_size:7")
    read = file_reader(path)
    start, length = ArrayRecordRanges.open_span(os.path.getsize(path))
    ranges = opened(path, first=read(start, length))
    assert ranges.footer.num_records == len(records)
    assert ranges.stats() == {"requests": 1, "bytes": length}  # the open, fetched by the caller
    wanted = [119, 3, 50, 51, 3]
    runs = ranges.ranges(ranges.chunks_of(wanted))
    fetched = [read(a, b - a) for a, b, _ in runs]
    assert ranges.records(wanted, fetched) == [records[i] for i in wanted]
    assert ranges.stats() == {"requests": 1 + len(runs),
                              "bytes": length + sum(b - a for a, b, _ in runs)}
    with pytest.raises(RecordError, match="shorter than its listed size"):
        ranges.records(wanted, [data[:-1] for data in fetched])


def test_a_file_within_the_opens_request_is_read_by_that_request_alone(
        tmp_path: pathlib.Path) -> None:
    records = [b"r%d" % i * (i % 9) for i in range(300)]
    path = write_records(tmp_path / "two-blocks.array_record", records)
    assert os.path.getsize(path) == 2 * BLOCK  # no larger than the open's request
    asked: list[tuple[int, int]] = []
    read = file_reader(path)

    def counted(offset: int, length: int) -> bytes:
        asked.append((offset, length))
        return read(offset, length)

    ranges = ArrayRecordRanges(counted, 2 * BLOCK, name=path)
    assert ranges.read([299, 0, 7, 7]) == [records[i] for i in (299, 0, 7, 7)]
    assert ranges.read(range(300)) == records
    assert ranges.ranges(ranges.chunks_of([5, 250])) == []  # no request left to make
    assert ranges.records([5, 250], []) == [records[5], records[250]]
    assert asked == [(0, 2 * BLOCK)]
    assert ranges.stats() == {"requests": 1, "bytes": 2 * BLOCK}


def test_small_remote_files_read_by_range_cost_one_request_each(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ranged_reads=True over a dataset of files of two blocks: each file's one request
    (its tail, here the whole file) serves its records; counted at the memory:// store."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    folder = tmp_path / "ds"
    write_dataset([{"i": np.int32(i)} for i in range(60)], str(folder), shards=3)
    memory = fsspec.filesystem("memory")
    names = sorted(p.name for p in folder.iterdir() if p.suffix == ".array_record")
    for path in folder.iterdir():
        memory.pipe(f"/ranged-small/{path.name}", path.read_bytes())
    assert [os.path.getsize(folder / name) for name in names] == [2 * BLOCK] * 3
    asked: list[tuple[str, int | None, int | None]] = []
    cat_file = MemoryFileSystem.cat_file

    def counted(self: MemoryFileSystem, path: str, start: int | None = None,
                end: int | None = None, **kwargs: object) -> bytes:
        asked.append((os.path.basename(path), start, end))
        return cat_file(self, path, start=start, end=end, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "cat_file", counted)
    try:
        with ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1),
                                     "memory://ranged-small", ranged_reads=True,
                                     cache=ShardCache(tmp_path / "cache")) as source:
            assert [int(r["i"]) for r in source] == list(range(60))
            storage = source.stats()["storage"]
        assert sorted(a for a in asked if a[0] in names) == [
            (name, 0, 2 * BLOCK) for name in names]
        assert (storage["ranged_requests"], storage["fetched"]) == (3, 0)
    finally:
        memory.rm("/ranged-small", recursive=True)
