"""``Fetcher.read_ranges`` against the S3 test server: ranges of several objects sent
together answer the same bytes, one request each, with the retries, the version checks and
the errors of one range read alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("s3fs")

if TYPE_CHECKING:
    from tests.storage.conftest import S3

DATA = {f"part-{k}.bin": bytes((k * 7 + i) % 251 for i in range(40_000)) for k in range(3)}
WANTED = [("part-0.bin", 0, 10), ("part-2.bin", 39_990, 40_000), ("part-1.bin", 1_000, 31_000),
          ("part-0.bin", 20_000, 20_001), ("part-2.bin", 5, 5)]


@pytest.fixture
def objects(s3: S3) -> dict[str, object]:
    from datarax.storage import list_objects

    for name, data in DATA.items():
        s3.put(f"ds/{name}", data)
    return {o.url.rsplit("/", 1)[1]: o for o in list_objects(s3.url("ds/*.bin"))}


def _asked(objects: dict[str, object]) -> list[tuple[object, int, int]]:
    return [(objects[name], start, end) for name, start, end in WANTED]


def test_ranges_sent_together_answer_each_ranges_bytes_one_request_each(
        s3: S3, objects: dict[str, object]) -> None:
    from datarax.storage.fetch import Fetcher

    s3.proxy.reset()
    fetcher = Fetcher()
    got = fetcher.read_ranges(_asked(objects))
    assert got == [DATA[name][start:end] for name, start, end in WANTED]
    assert s3.proxy.count("GET") == 4  # the empty range asks nothing
    assert s3.proxy.count("HEAD") == 0
    assert fetcher.stats.snapshot()["retries"] == 0


def test_a_throttled_range_is_retried_with_the_others_answers_kept(
        s3: S3, objects: dict[str, object]) -> None:
    from datarax.storage.fetch import Fetcher

    s3.proxy.reset()
    s3.proxy.throttle("part-1.bin", 2)  # its first two GETs answer 503 SlowDown
    fetcher = Fetcher()
    got = fetcher.read_ranges(_asked(objects))
    assert got == [DATA[name][start:end] for name, start, end in WANTED]
    assert s3.proxy.count("GET", "part-1.bin") == 3
    assert s3.proxy.count("GET", "part-0.bin") == 2  # the others were not asked again
    stats = fetcher.stats.snapshot()
    assert (stats["retries"], stats["throttled"]) == (2, 2)


def test_a_rewritten_object_is_refused_by_name_not_served(
        s3: S3, objects: dict[str, object]) -> None:
    from datarax.storage import RemoteObjectError
    from datarax.storage.fetch import Fetcher

    fetcher = Fetcher()
    s3.put("ds/part-1.bin", DATA["part-1.bin"][::-1])  # same size, another version
    with pytest.raises(RemoteObjectError, match=r"part-1\.bin' changed in the store") as err:
        fetcher.read_ranges(_asked(objects))
    assert "bytes 1000-31000" in str(err.value)


def test_a_deleted_object_is_named_as_read_alone(s3: S3, objects: dict[str, object]) -> None:
    from datarax.storage import RemoteObjectError
    from datarax.storage.fetch import Fetcher

    s3.delete("ds/part-2.bin")
    with pytest.raises(RemoteObjectError, match=r"part-2\.bin' was deleted from the store"):
        Fetcher().read_ranges(_asked(objects))


def test_each_answer_is_handed_on_as_it_comes_in_order_of_the_ranges(
        s3: S3, objects: dict[str, object]) -> None:
    import concurrent.futures
    import threading

    from datarax.storage.fetch import Fetcher

    threads: set[str] = set()

    def then(i: int, data: bytes) -> tuple[int, bytes]:
        threads.add(threading.current_thread().name)
        return i, data[:3]

    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="then") as pool:
        got = Fetcher().read_ranges(_asked(objects), pool.map, then, pool.submit)
    assert got == [(i, DATA[name][start:end][:3]) for i, (name, start, end) in enumerate(WANTED)]
    assert threads and all(name.startswith("then") for name in threads)


@pytest.mark.parametrize("options", [None, {"config_kwargs": {"user_agent": "my-job/1"}}])
def test_requests_carry_datarax_s_user_agent_unless_the_options_set_one(
        s3: S3, objects: dict[str, object], monkeypatch: pytest.MonkeyPatch,
        options: dict[str, object] | None) -> None:
    from datarax.storage.fetch import Fetcher

    agents: list[str] = []
    origin = s3.proxy.origin

    def noting(req: object, body: object) -> object:
        agents.append(req.headers.get("User-Agent", ""))  # type: ignore[attr-defined]
        return origin(req, body)

    monkeypatch.setattr(s3.proxy, "origin", noting)
    got = Fetcher(options).read_ranges(_asked(objects))
    assert got == [DATA[name][start:end] for name, start, end in WANTED]
    assert len(agents) == 4
    if options is None:
        assert all(a.startswith("datarax Botocore/") for a in agents)
    else:
        assert all(a.startswith("my-job/1") for a in agents)


def test_the_ranges_an_answer_leads_to_are_read_in_the_same_call(
        s3: S3, objects: dict[str, object]) -> None:
    """A ``then`` returning a ``FollowUp`` (several running at once): its ranges are read
    in the same call, one request each, and its ``finish`` of their bytes is the item's
    result; a follow-up throttled is retried with the others' answers kept."""
    import concurrent.futures

    from datarax.storage.fetch import Fetcher, FollowUp

    s3.proxy.reset()
    s3.proxy.throttle("part-1.bin", 1)  # the first GET of part-1 (a follow-up) answers 503
    part1 = objects["part-1.bin"]

    def then(i: int, data: bytes) -> object:
        if i % 2:  # ranges 1 and 3 lead to two more of part-1
            return FollowUp([(part1, i, i + 2), (part1, 100, 101)],
                            lambda got, data=data: (data[:2], *got))
        return data[:2]

    wanted = _asked(objects)
    wanted = [w for w in wanted if w[0] is not part1]  # part-1 only in the follow-ups
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = Fetcher().read_ranges(wanted, pool.map, then, pool.submit)
    one = DATA["part-1.bin"]
    assert got == [DATA[w[0].url.rsplit("/", 1)[1]][w[1]:w[2]][:2] if i % 2 == 0 else
                   (DATA[w[0].url.rsplit("/", 1)[1]][w[1]:w[2]][:2], one[i:i + 2], one[100:101])
                   for i, w in enumerate(wanted)]
    assert s3.proxy.count("GET", "part-1.bin") == 5  # 4 follow-ups, one of them twice
    assert s3.proxy.count("GET", "part-0.bin") + s3.proxy.count("GET", "part-2.bin") == 3
