"""Counts given to the storage readers as NumPy integers (read from a config array, a
checkpoint kept in NumPy) are taken as the same Python ints, as the other options are;
what is not a count is still refused, naming the argument. A RetryPolicy's numbers are
checked when it is made, not at the first failure mid-epoch."""

from __future__ import annotations

import numpy as np
import pytest

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("array_record")

from int_record_files import write_records  # noqa: E402

from datarax.core.errors import ConfigError  # noqa: E402
from datarax.storage import (  # noqa: E402
    ArrayRecordRanges,
    RemoteShards,
    RetryPolicy,
    ShardCache,
    list_objects,
)


def _objects(prefix: str):
    for i in range(3):
        fsspec.filesystem("memory").pipe(f"/{prefix}/{i}.bin", bytes([i]) * 10)
    return list_objects(f"memory://{prefix}/*.bin")


def test_remote_shards_take_numpy_ints_as_the_same_ints(tmp_path) -> None:
    shards = RemoteShards(_objects("np-counts"), cache=ShardCache(tmp_path, max_bytes=100),
                          threads=np.int64(2), ahead=np.int32(3), behind=np.int64(2),
                          parallel=np.uint8(2), handles=np.int16(4),
                          retry=RetryPolicy(initial_delay=0.0))
    try:
        assert (shards.threads, shards.ahead, shards.behind, shards.parallel,
                shards.handle_limit) == (2, 3, 2, 2, 4)
        assert all(type(v) is int for v in (shards.threads, shards.ahead, shards.behind,
                                            shards.parallel, shards.handle_limit))
        assert [open(shards.local_path(i), "rb").read() for i in range(3)] == [
            bytes([i]) * 10 for i in range(3)]
    finally:
        shards.close()


@pytest.mark.parametrize(("name", "value", "message"), [
    ("threads", 0, "RemoteShards threads must be an int >= 1, got 0."),
    ("ahead", 2.0, "RemoteShards ahead must be an int >= 1, got 2.0."),
    ("behind", True, "RemoteShards behind must be an int >= 0, got True."),
    ("parallel", np.int64(-1), "RemoteShards parallel must be an int >= 1, got -1."),
    ("handles", np.int64(0), "RemoteShards handles must be an int >= 1, got 0."),
])
def test_remote_shards_refuse_what_is_not_a_count(tmp_path, name, value, message) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace(".", r"\.") + "$"):
        RemoteShards(_objects("np-counts-bad"), cache=ShardCache(tmp_path, max_bytes=100),
                     **{name: value})


def test_ranged_reads_take_numpy_ints_as_the_same_ints(tmp_path) -> None:
    path = write_records(tmp_path / "r.array_record", (b"record %d" % i for i in range(20)))
    size = np.int64((tmp_path / "r.array_record").stat().st_size)
    ranges = ArrayRecordRanges.from_url(path, size=size, parallel=np.int64(2),
                                        merge_gap=np.int32(0), tail=np.int64(1 << 16))
    assert (ranges.size, ranges.parallel, ranges.merge_gap) == (int(size), 2, 0)
    assert ranges.read([np.int64(19), 3]) == [b"record 19", b"record 3"]
    with pytest.raises(ConfigError, match=r"ArrayRecordRanges parallel must be an int >= 1, "
                                          r"got 0\."):
        ArrayRecordRanges.from_url(path, parallel=np.int64(0))
    with pytest.raises(ConfigError, match=r"ArrayRecordRanges merge_gap must be an int >= 0 "
                                          r"\(bytes\), got -1\."):
        ArrayRecordRanges.from_url(path, merge_gap=-1)


def test_a_retry_policy_takes_numpy_numbers_and_refuses_bad_ones_when_made() -> None:
    policy = RetryPolicy(max_retries=np.int64(3), initial_delay=np.float32(0.5),
                         budget_s=np.int64(8))
    assert (policy.max_retries, policy.initial_delay, policy.budget_s) == (3, 0.5, 8.0)
    assert type(policy.max_retries) is int and type(policy.budget_s) is float
    assert policy.read_timeout_s == 2.0
    for kwargs, message in [
            ({"initial_delay": -1}, "RetryPolicy initial_delay must be a finite number >= 0 "
                                    "(seconds), got -1."),
            ({"budget_s": "60"}, "RetryPolicy budget_s must be a finite number >= 0 (seconds), "
                                 "got '60'."),
            ({"multiplier": 0.5}, "RetryPolicy multiplier must be a finite number >= 1 (the "
                                  "factor each retry's delay grows by), got 0.5."),
            ({"max_retries": -1}, "RetryPolicy max_retries must be an int >= 0 (retries of one "
                                  "request), got -1.")]:
        with pytest.raises(ConfigError) as caught:
            RetryPolicy(**kwargs)
        assert str(caught.value) == message
