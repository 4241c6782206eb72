"""The bucket benchmark's counting proxy counts requests and body bytes exactly, per
port, forwards what the origin says (status, headers, ranges), and the share check
catches a record served twice or missed. Fast: a tiny in-process origin, no S3."""

from __future__ import annotations

import http.client
import http.server
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bucket_modes import MODES, check_shares, mode_named  # noqa: E402
from benchmarks.counting_proxy import PIECE, CountingProxy, read_stats  # noqa: E402

BIG = bytes(range(256)) * (PIECE // 256 * 2 + 1000)  # over two pieces of the proxy's stream
OBJECTS = {"/big": BIG, "/small": b"0123456789"}


class Origin(http.server.BaseHTTPRequestHandler):
    """Serves OBJECTS with single-range GETs (206), HEAD and 404, and an ETag."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: bool) -> None:
        data = OBJECTS.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            if body:
                self.wfile.write(b"not found")
            return
        status, part = 200, data
        ranged = self.headers.get("Range")
        if ranged:
            start, end = (int(x) for x in ranged.removeprefix("bytes=").split("-"))
            status, part = 206, data[start:end + 1]
        self.send_response(status)
        self.send_header("ETag", '"v1"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        if body:
            self.wfile.write(part)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)


@pytest.fixture
def proxy() -> Iterator[CountingProxy]:
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, args=(0.05,), daemon=True).start()
    counting = CountingProxy(origin.server_address[:2], labels=("h0", "h1"))
    try:
        yield counting
    finally:
        counting.close()
        origin.shutdown()
        origin.server_close()


def get(url: str, headers: dict[str, str] | None = None,
        method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_requests_and_body_bytes_are_counted_exactly_per_port(proxy):
    h0, h1 = proxy.urls["h0"], proxy.urls["h1"]
    status, headers, body = get(h0 + "/big")
    assert (status, body, headers["ETag"]) == (200, BIG, '"v1"')
    status, headers, body = get(h0 + "/big", {"Range": "bytes=100-1099"})
    assert (status, body) == (206, BIG[100:1100])
    assert headers["Content-Range"] == f"bytes 100-1099/{len(BIG)}"
    status, headers, body = get(h1 + "/small", method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", "10")
    assert get(h1 + "/gone")[0] == 404
    stats = read_stats(h1)  # asking is neither delayed nor counted
    assert stats["h0"] == {"requests": 2, "by_method": {"GET": 2}, "body_bytes": len(BIG) + 1000,
                           "statuses": {"200": 1, "206": 1}}
    assert stats["h1"] == {"requests": 2, "by_method": {"HEAD": 1, "GET": 1},
                           "body_bytes": len(b"not found"), "statuses": {"200": 1, "404": 1}}
    assert proxy.stats() == read_stats(h0)
    proxy.reset()
    assert read_stats(h0)["h0"]["requests"] == read_stats(h0)["h1"]["body_bytes"] == 0


def test_one_connection_carries_several_requests(proxy):
    host, port = proxy.urls["h0"].removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        for _ in range(3):  # keep-alive: each answer's length tells where the next starts
            conn.request("GET", "/small")
            assert conn.getresponse().read() == b"0123456789"
    finally:
        conn.close()
    assert proxy.stats()["h0"]["body_bytes"] == 30


def test_the_share_check_catches_a_record_twice_or_missing(tmp_path):
    order = np.random.default_rng(0).permutation(11).astype(np.uint32)
    np.save(tmp_path / "h0-e0.npy", order[:5])
    np.save(tmp_path / "h1-e0.npy", order[5:10])  # 11 % 2: one record left out
    assert check_shares(tmp_path, 2, 0, 11)
    np.save(tmp_path / "h1-e0.npy", np.concatenate([order[5:9], order[:1]]))  # one twice
    with pytest.raises(AssertionError, match="10 records served, 9 distinct, expected 10"):
        check_shares(tmp_path, 2, 0, 11)
    np.save(tmp_path / "h0-e0.npy", order[:10])
    with pytest.raises(AssertionError, match="epoch 0: 10 records served, 10 distinct, "
                                             "expected 12 once each"):
        check_shares(tmp_path, 1, 0, 12)  # two records missing


def test_modes_have_distinct_names_and_are_found_by_name():
    assert len({m.name for m in MODES}) == len(MODES)
    assert mode_named("window4").config == {"shuffle_files": True, "shuffle_window": 4}
    with pytest.raises(KeyError, match="no mode named 'nope'; the modes are .*'global'"):
        mode_named("nope")


def test_requests_and_body_bytes_by_path_add_up_over_ports(proxy):
    get(proxy.urls["h0"] + "/big")
    get(proxy.urls["h1"] + "/big", {"Range": "bytes=0-9"})
    get(proxy.urls["h1"] + "/small", method="HEAD")
    assert (proxy.count("GET", "/big"), proxy.count("HEAD"), proxy.count("GET", "/small")) == (2, 1, 0)
    assert proxy.requests == {("GET", "/big"): 2, ("HEAD", "/small"): 1}
    assert (proxy.sent("/big"), proxy.sent("/small")) == (len(BIG) + 10, 0)


def test_a_subclass_answers_itself_or_cuts_a_body_and_the_counts_say_so():
    class Faulty(CountingProxy):
        def refuse(self, method: str, path: str) -> tuple[int, bytes, str] | None:
            return (503, b"slow down", "text/plain") if path == "/small" else None

        def cut(self, method: str, path: str, status: int, length: int) -> int | None:
            return length // 2

    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, args=(0.05,), daemon=True).start()
    faulty = Faulty(origin.server_address[:2])
    try:
        assert get(faulty.urls["h0"] + "/small")[::2] == (503, b"slow down")
        with pytest.raises(http.client.IncompleteRead) as cut:
            urllib.request.urlopen(faulty.urls["h0"] + "/big", timeout=30).read()
        assert cut.value.partial == BIG[: len(BIG) // 2]
        assert faulty.sent("/big") == len(BIG) // 2 and faulty.sent("/small") == len(b"slow down")
        assert faulty.stats()["h0"]["statuses"] == {"200": 1, "503": 1}
    finally:
        faulty.close()
        origin.shutdown()
        origin.server_close()
