"""A glob over ``http(s)://``: the server's folder listing names the files (without
their sizes); each is then asked for its size."""

from __future__ import annotations

import functools
import http.server
import threading

import numpy as np
import pytest

from datarax.storage import ShardCache, list_objects


@pytest.fixture
def http_folder(tmp_path):
    pytest.importorskip("aiohttp")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_glob_over_http_lists_the_files_with_their_sizes_and_reads_them(http_folder, tmp_path):
    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    pytest.importorskip("array_record")
    folder, url = http_folder
    write_dataset([{"x": np.int32(i)} for i in range(30)], folder / "ds", shards=3)
    objects = list_objects(f"{url}/ds/data-*.array_record")
    assert [(o.name, o.size) for o in objects] == [
        (p.name, p.stat().st_size) for p in sorted((folder / "ds").glob("data-*.array_record"))]
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1),
                                     f"{url}/ds/data-*.array_record",
                                     cache=ShardCache(tmp_path / "cache"))
    assert [int(r["x"]) for r in source] == list(range(30))
    source.close()
