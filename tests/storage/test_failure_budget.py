"""The failure budget: a store that cannot be reached (nothing listening, a server stopped
mid-run, a server that accepts but never answers) fails within ``DATARAX_RETRY_BUDGET``
seconds with a ``RemoteStoreError`` naming the URL, the attempts, the time and what to do.

The budgets here are 1 s; each test's ``pytest.mark.timeout`` is what fails it if the
library's own retries or timeouts (s3fs, botocore: 15 s a read, 5 tries) ran inside ours."""

from __future__ import annotations

import pathlib
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import fsspec
import numpy as np
import pytest
from waiting import eventually

from datarax.errors import ConfigError
from datarax.storage import RetryPolicy, StorageStats
from datarax.storage.errors import RemoteStoreError
from datarax.storage.fetch import Fetcher
from datarax.storage.urls import RemoteObject, filesystem, list_objects

if TYPE_CHECKING:
    from tests.storage.conftest import S3

BUDGET = "1"
# what every budget error says: the URL, the attempts and seconds, the cause, what to do
BUDGET_USED = (r"still failing after \d+ attempts? in \d+\.\d s \(the retry budget of 1 s used; "
               r"{cause}.*The store is down.*Check the endpoint.*raise DATARAX_RETRY_BUDGET "
               r"\(seconds; now 1\)")


def test_the_budget_comes_from_the_environment_and_sets_the_timeouts(monkeypatch):
    monkeypatch.delenv("DATARAX_RETRY_BUDGET", raising=False)
    default = RetryPolicy()
    assert (default.budget_s, default.connect_timeout_s, default.read_timeout_s) == (60, 3, 15)
    monkeypatch.setenv("DATARAX_RETRY_BUDGET", "8")
    assert (RetryPolicy().budget_s, RetryPolicy().connect_timeout_s) == (8, 0.4)
    assert RetryPolicy().read_timeout_s == 2
    assert RetryPolicy(budget_s=600).read_timeout_s == 15  # a slow answer is never cut short
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv("DATARAX_RETRY_BUDGET", bad)
        with pytest.raises(ConfigError, match=rf"DATARAX_RETRY_BUDGET='{bad}' is not a number "
                                              r"of seconds.*e\.g\. DATARAX_RETRY_BUDGET=120"):
            RetryPolicy()


def test_a_budget_of_zero_gives_up_after_the_first_attempt(tmp_path, monkeypatch):
    memory = fsspec.filesystem("memory")
    memory.pipe("/budget/a.bin", b"abcd")
    calls = []

    def cat_file(path, start=None, end=None, **kw):
        calls.append(path)
        raise TimeoutError("read timed out")

    monkeypatch.setattr(memory, "cat_file", cat_file)
    part = tmp_path / "a.part"
    part.write_bytes(b"\0" * 4)
    fetcher = Fetcher(retry=RetryPolicy(budget_s=0), stats=StorageStats())
    with pytest.raises(RemoteStoreError, match=r"'memory://budget/a.bin': still failing after 1 "
                       r"attempt in \d+\.\d s \(the retry budget of 0 s used; TimeoutError: read "
                       r"timed out\)") as err:
        fetcher.download(RemoteObject("memory://budget/a.bin", 4), str(part))
    assert len(calls) == 1 and fetcher.stats.snapshot()["retries"] == 0
    assert err.value.url == "memory://budget/a.bin"


def test_timeouts_the_user_sets_are_kept_and_the_others_come_from_the_budget():
    pytest.importorskip("gcsfs")
    policy = RetryPolicy(budget_s=20)
    fs, _ = filesystem("gs://bucket/a.bin", {"token": "anon"}, policy)
    assert (fs.requests_timeout.sock_connect, fs.requests_timeout.sock_read) == (1, 5)
    assert fs.requests_timeout.total is None  # a long download is never cut
    fs, _ = filesystem("gs://bucket/a.bin", {"token": "anon", "requests_timeout": 99}, policy)
    assert fs.requests_timeout == 99
    fs, _ = filesystem("https://example.com/a.bin", None, policy)
    assert fs.client_kwargs["timeout"].sock_read == 5


# --------------------------------------------------------------- S3 that cannot be reached
def _closed_port() -> int:
    from tests.storage.conftest import free_port

    return free_port()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Credentials for a local S3 endpoint, the budget at 1 s, no instance cached."""
    s3fs = pytest.importorskip("s3fs")

    _endpoint(monkeypatch, "http://127.0.0.1:1")
    monkeypatch.setenv("DATARAX_RETRY_BUDGET", BUDGET)
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def _endpoint(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    from tests.storage.conftest import point_clients_at

    point_clients_at(monkeypatch, url)


def _forty_in_four_shards(tmp_path: pathlib.Path) -> pathlib.Path:
    """A dataset of 40 ``int32`` records ``i`` in 4 shards, in ``tmp_path/ds``."""
    from datarax.dataset import write_dataset

    folder = tmp_path / "ds"
    write_dataset([{"i": np.int32(i)} for i in range(40)], folder, shards=4)
    return folder


# a connect's own answer (refused; or accepted into a silent server's backlog), never a
# connect timeout: the budget's connect timeouts are short (0.1 s at 1 s, 0.2 s at 4), and on a
# loaded machine loopback's answer can come later (ConnectTimeoutError, seen under -n 2)
CONNECT_IN_TIME = {"config_kwargs": {"connect_timeout": 10}}


def _serve(port: int) -> Any:  # moto keeps its buckets in this process across servers
    from tests.storage.conftest import moto_server

    return moto_server(port)


@pytest.mark.timeout(40)
def test_a_port_nobody_listens_on_fails_within_the_budget(aws_env, monkeypatch):
    _endpoint(monkeypatch, f"http://127.0.0.1:{_closed_port()}")
    stats = StorageStats()
    with pytest.raises(RemoteStoreError, match=r"cannot read 's3://nobody/a\.bin': "
                       + BUDGET_USED.format(cause="EndpointConnectionError")) as err:
        list_objects("s3://nobody/a.bin", CONNECT_IN_TIME, stats=stats)
    assert err.value.url == "s3://nobody/a.bin"
    # the budget ended it, not the retry count (on a loaded machine the first attempt,
    # which opens the client session, may use all 1 s: no retry then)
    assert stats.snapshot()["retries"] < 10


@pytest.mark.timeout(40)
def test_a_server_that_never_answers_fails_within_the_budget(aws_env, monkeypatch):
    with socket.socket() as silent:  # connections are accepted (backlog), never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        _endpoint(monkeypatch, f"http://127.0.0.1:{silent.getsockname()[1]}")
        with pytest.raises(RemoteStoreError, match=r"cannot read 's3://silent/a\.bin': "
                           + BUDGET_USED.format(cause="ReadTimeoutError")):
            list_objects("s3://silent/a.bin", CONNECT_IN_TIME)


def _upload(endpoint: str, bucket: str, folder: pathlib.Path) -> None:
    """A bucket on the server at ``endpoint`` holding ``folder``'s files under ``ds/``."""
    from tests.storage.conftest import server_client, upload_folder

    client = server_client(endpoint)
    client.create_bucket(Bucket=bucket)
    upload_folder(client, bucket, folder, "ds")


@pytest.mark.timeout(120)
def test_a_server_stopped_mid_run_stops_the_read_within_the_budget(
        aws_env, monkeypatch, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("array_record")
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    folder = _forty_in_four_shards(tmp_path)
    port = _closed_port()
    server = _serve(port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _upload(endpoint, "stopped", folder)
        _endpoint(monkeypatch, endpoint)
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), "s3://stopped/ds",
                                         cache=ShardCache(tmp_path / "cache", max_bytes="1M"),
                                         storage_options=CONNECT_IN_TIME)
    finally:
        server.stop()  # the dataset was listed; no shard is downloaded yet
    try:
        with pytest.raises(RemoteStoreError, match=r"cannot read 's3://stopped/ds/data-00000-of-"
                           r"00004\.array_record': " + BUDGET_USED.format(
                               cause="EndpointConnectionError")) as err:
            source.get_batch(4)
        assert err.value.url == "s3://stopped/ds/data-00000-of-00004.array_record"
    finally:
        source.close()


@pytest.mark.timeout(60)
def test_a_read_stopped_by_a_server_down_goes_on_exactly_once_it_is_back(
        aws_env, monkeypatch, tmp_path: pathlib.Path) -> None:
    # the same source after a RemoteStoreError, or a restore of its state, reads on from
    # the batch that failed (before, the source raised that error again at every read)
    pytest.importorskip("array_record")
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    folder = _forty_in_four_shards(tmp_path)
    config = ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=1, seed=5)
    with ArrayRecordSourceModule(config, str(folder)) as local:
        expected = [int(i) for _ in range(10) for i in local.get_batch(4)["i"]]
    # the reads that succeed wait as long as they need (the budget's timeouts would be a
    # fraction of its 1 s); the read while the server is down ends within the budget
    patient = {"config_kwargs": {"connect_timeout": 10, "read_timeout": 15}}
    port = _closed_port()
    endpoint = f"http://127.0.0.1:{port}"

    def source(name: str) -> Any:
        return ArrayRecordSourceModule(config, "s3://comeback/ds",
                                       cache=ShardCache(tmp_path / name, max_bytes="1M"),
                                       storage_options=patient)

    server = _serve(port)
    try:
        _upload(endpoint, "comeback", folder)
        _endpoint(monkeypatch, endpoint)
        with source("first") as first:
            served = [int(i) for _ in range(3) for i in first.get_batch(4)["i"]]
            state = first.get_state()  # mid-epoch: 12 records served
        reader = source("second")  # an empty cache: its next files must come from the store
    finally:
        server.stop()
    try:
        reader.set_state(state)
        with pytest.raises(RemoteStoreError, match=r"cannot read 's3://comeback/ds/data-0000"):
            reader.get_batch(4)
        after_error = reader.get_state()
        server = _serve(port)
        try:
            rest = [int(i) for _ in range(7) for i in reader.get_batch(4)["i"]]  # the same reader
            with source("third") as fresh:  # a restore of the state taken after the error
                fresh.set_state(after_error)
                restored = [int(i) for _ in range(7) for i in fresh.get_batch(4)["i"]]
        finally:
            server.stop()
    finally:
        reader.close()
    assert served + rest == expected  # nothing served twice, nothing skipped
    assert restored == rest


def test_throttling_is_still_retried_within_the_budget(s3: S3, monkeypatch,
                                                       tmp_path: pathlib.Path) -> None:
    # a budget a loaded machine cannot use up: the throttles are retried, whatever they cost
    # (at 1 s, a slow first answer leaves no room for a retry)
    monkeypatch.setenv("DATARAX_RETRY_BUDGET", "60")
    s3.put("live/a.bin", b"x" * 1000)
    s3.proxy.throttle("live/a.bin", 2)  # two 503s, then the bytes
    fetcher = Fetcher()
    part = tmp_path / "a.part"
    part.write_bytes(b"\0" * 1000)
    fetcher.download(list_objects(s3.url("live/a.bin"))[0], str(part))
    assert part.read_bytes() == b"x" * 1000
    assert fetcher.stats.snapshot()["throttled"] == 2



@pytest.mark.timeout(120)
def test_stopping_the_shards_ends_a_readers_download_at_its_next_retry(
        s3: S3, monkeypatch, tmp_path: pathlib.Path) -> None:
    # a source's close stops its downloads before it waits for its reader threads: one
    # retrying a failing store (here 503 on every GET) ends at its next retry, not after
    # the budget (before: close waited up to DATARAX_RETRY_BUDGET, 60 s, after an error)
    from datarax.storage import RemoteShards, ShardCache
    from datarax.storage.fetch import DownloadStopped

    monkeypatch.setenv("DATARAX_RETRY_BUDGET", "60")
    s3.put("live/a.bin", b"x" * 1000)
    s3.proxy.throttle(f"{s3.bucket}/live/a.bin", 10**6)
    shards = RemoteShards(list_objects(s3.url("live/a.bin")),
                          cache=ShardCache(tmp_path / "cache", max_bytes="1M"))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            shards.local_path(0)
        except BaseException as err:  # noqa: BLE001 - the test asserts on it
            outcome.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    eventually(lambda: s3.proxy.count("GET", "live/a.bin") >= 2)  # retrying
    before = s3.proxy.count("GET", "live/a.bin")
    shards.stop()
    reader.join()
    shards.close()
    assert [type(err) for err in outcome] == [DownloadStopped]
    # the attempt that may have begun before stop(), and the one after a backoff
    assert s3.proxy.count("GET", "live/a.bin") - before <= 2
