"""Two real JAX processes on localhost (CPU, gloo collectives), each reading its share.

Together they cover every record exactly once per epoch with equal step counts, each
share resumes exactly from JSON state, per-record augmentation does not depend on
the process count, and ``datarax.sharding.global_batch`` assembles both processes'
batches into one array over a mesh of all four CPU devices.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from datarax.testing import collect

from forked_runs import ForkedRuns
from reliability_sources import make_memory_pipeline

HERE = Path(__file__).resolve().parent
NUM_RECORDS, BATCH = 24, 4


# The two processes are forks of one that did these imports and nothing else (no backend,
# no JAX option set): one interpreter start-up and import for both, not one each.
WORKER_IMPORTS = """
import jax, numpy
from jax.experimental import multihost_utils
from flax import nnx
import datarax.pipeline, datarax.sharding, datarax.testing
import reliability_sources
try:
    import reliability_arrayrecord
except ImportError:
    pass
"""


def _run_two_processes(tmp_path: Path, extra: list[str],
                       worker: str = "multihost_worker.py") -> list[dict]:
    """As ``jax_processes.run_jax_processes``, the processes forked as WORKER_IMPORTS says."""
    import portpicker

    port = portpicker.pick_unused_port()
    path = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(path))
    env.pop("XLA_FLAGS", None)  # the worker sets its own device count
    tmp_path.mkdir(parents=True, exist_ok=True)
    outs = [tmp_path / f"proc{i}.json" for i in range(2)]
    logs = [tmp_path / f"proc{i}.log" for i in range(2)]
    with ForkedRuns(WORKER_IMPORTS, tmp_path, env, timeout=120) as runs:
        pids = [runs.start(HERE / worker, [str(port), str(i), str(out), *extra], log)
                for i, (out, log) in enumerate(zip(outs, logs))]
        codes = [runs.wait(pid) for pid in pids]
    for i, code in enumerate(codes):
        assert code == 0, f"process {i} failed ({code}):\n{logs[i].read_text()[-3000:]}"
    return [json.loads(out.read_text()) for out in outs]


def test_two_processes_cover_each_epoch_once_and_resume_exactly(tmp_path):
    extra: list[str] = []
    try:
        from reliability_arrayrecord import write_files

        import datarax.sources.array_record  # noqa: F401

        extra = [write_files(tmp_path / "ar", 26, num_files=3)]
    except ImportError:
        pass
    results = _run_two_processes(tmp_path, extra)
    assert [r["process_index"] for r in results] == [0, 1]
    assert all(r["process_count"] == 2 for r in results)
    assert [r["shard"] for r in results] == [[0, 2], [1, 2]]
    # Equal step counts, every record exactly once per epoch over both processes.
    for epoch in range(2):
        per_process = [[b for b in r["epochs"] if b["epoch"] == epoch] for r in results]
        assert len(per_process[0]) == len(per_process[1]) == NUM_RECORDS // 2 // BATCH
        ids = [x for batches in per_process for b in batches for x in b["x"]]
        assert sorted(ids) == list(range(NUM_RECORDS))
    # Globally shuffled, then split: the concatenation is the single-process order.
    single = collect(
        make_memory_pipeline(
            NUM_RECORDS, BATCH, shuffle=True, stochastic=True, drop_remainder=True,
            shard_index=0, shard_count=1,
        ),
        2,
    )
    for epoch in range(2):
        order = [x // 2 for e, b in single if e == epoch for x in b["x"].tolist()]
        split = [x for r in results for b in r["epochs"] if b["epoch"] == epoch for x in b["x"]]
        assert split == order
    # Per-record augmentation is the same whatever the process count.
    noise_single = {
        (e, int(x) // 2): n.tolist() for e, b in single for x, n in zip(b["x"], b["noise"])
    }
    for r in results:
        for b in r["epochs"]:
            for x, n in zip(b["x"], b["noise"]):
                assert np.allclose(n, noise_single[(b["epoch"], x)], rtol=0, atol=0)
    # Exact resume on each process.
    assert [r["resume_batches"] for r in results] == [6, 6]
    # Global batches over the 4-device mesh of both processes.
    for r in results:
        assert r["mesh_devices"] == 4
        assert r["global_shapes"] == [[2 * BATCH]] * 3
    e0 = [[b for b in r["epochs"] if b["epoch"] == 0] for r in results]
    for step in range(3):
        expected = e0[0][step]["x"] + e0[1][step]["x"]
        for r in results:
            assert r["gathered"][step] == expected
            assert r["global_sums"][step] == 2 * sum(expected)
    # Forward-only streams: every 2nd record per process, in whole rounds of 2 so both
    # shares are equally long; record 20 (a partial last round) is left out.
    streams = [[i for b in r["stream_ids"] for i in b] for r in results]
    assert streams[0] == list(range(0, 20, 2)) and streams[1] == list(range(1, 20, 2))
    assert [r["stream_resume_batches"] for r in results] == [6, 6]
    if extra:
        _check_arrayrecord_shares(results, extra[0])


def _check_arrayrecord_shares(results: list[dict], paths: str) -> None:
    """26 records (record 7 bad, skipped), batch 3, drop_remainder: disjoint equal shares."""
    from reliability_arrayrecord import close_source, make_arrayrecord_pipeline

    assert [r["ar_shard"] for r in results] == [[0, 2], [1, 2]]
    for epoch in range(2):
        per = [[b for b in r["ar_epochs"] if b["epoch"] == epoch] for r in results]
        assert len(per[0]) == len(per[1]) == 4  # 13 positions (12 or 13 good) -> 4 batches
        ids = [i for batches in per for b in batches for i in b["id"]]
        assert len(ids) == len(set(ids)) == 24 and 7 not in ids
    # Each process's share equals the share one process computes with explicit shards.
    for index, r in enumerate(results):
        local = make_arrayrecord_pipeline(paths, 3, shuffle=True, drop_remainder=True,
                                          bad=frozenset({7}), shard_index=index, shard_count=2)
        expected = [(e, b["id"].tolist(), b["noise"].tolist()) for e, b in collect(local, 2)]
        close_source(local)
        assert [(b["epoch"], b["id"], b["noise"]) for b in r["ar_epochs"]] == expected
    assert [r["ar_resume_batches"] for r in results] == [8, 8]


@pytest.mark.slow
def test_an_orbax_checkpoint_of_two_processes_resumes_each_share(tmp_path):
    """Orbax writes a JSON item from process 0 only: datarax.checkpoint gathers every
    process's data state into it, and each process resumes its own share exactly
    (in-memory, a stream, ArrayRecord whose shares skipped different numbers of
    records and so stood at different positions)."""
    pytest.importorskip("orbax.checkpoint")
    directory = str(tmp_path / "checkpoints")
    extra = [directory]
    try:
        from reliability_arrayrecord import write_files

        import datarax.sources.array_record  # noqa: F401

        paths = [write_files(tmp_path / "ar", 26, num_files=3)]
    except ImportError:
        paths = []
    (tmp_path / "save").mkdir()
    (tmp_path / "restore").mkdir()
    saved = _run_two_processes(tmp_path / "save", [*extra, "save", *paths],
                               worker="multihost_orbax_worker.py")
    restored = _run_two_processes(tmp_path / "restore", [*extra, "restore", *paths],
                                  worker="multihost_orbax_worker.py")
    for name in saved[0]:
        assert [r[name]["shard"] for r in restored] == [[0, 2], [1, 2]], name
        assert [r[name]["rest"] for r in restored] == [r[name]["rest"] for r in saved], name
        assert all(r[name]["rest"] for r in saved), name  # each share had more to serve
    ids = [x for r in saved for b in r["memory"]["served"] + r["memory"]["rest"] for x in b]
    assert sorted(ids) == list(range(24))
    if paths:
        assert [r["arrayrecord"]["position"] for r in saved] == [6, 7]  # record 7 skipped
    # One process restores the two processes' step: process 0's state, an elastic restore
    # that serves the rest of both shares.
    import datarax.checkpoint
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig
    from flax import nnx

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(24, dtype=np.int32)})
    alone = Pipeline(source=source, batch_size=3, drop_remainder=True, rngs=nnx.Rngs(0),
                     shard_index=0, shard_count=1)
    with datarax.checkpoint.checkpoint_manager(f"{directory}/memory") as checkpoints:
        datarax.checkpoint.restore(checkpoints, 2, alone)
    rest = [x for b in alone for x in np.asarray(b["x"]).tolist()]
    assert sorted(rest) == sorted(x for r in saved for b in r["memory"]["rest"] for x in b)
