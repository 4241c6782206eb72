"""StatsLogger: snapshots of pipeline.stats() every k batches, as JSON lines and TensorBoard
scalars."""

from __future__ import annotations

import json
import struct
import sys

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.metrics import StatsLogger, flatten_numbers
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.core.extras import MissingExtraError


def make_pipeline(n: int = 100, batch_size: int = 10) -> Pipeline:
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(n, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=batch_size)


def read_events(folder) -> list[tuple[int, str, float]]:
    """``(step, tag, value)`` of every scalar in the TensorBoard event files of ``folder``
    (TFRecord framing: u64 length, u32 crc, payload, u32 crc)."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            payload = data[offset + 12 : offset + 12 + length]
            offset += 12 + length + 4
            event = event_pb2.Event.FromString(payload)
            for value in event.summary.value:
                out.append((event.step, value.tag, value.simple_value))
    return out


def test_jsonl_snapshot_every_k_batches_across_epochs(tmp_path):
    pipeline = make_pipeline()
    path = tmp_path / "stats.jsonl"
    with StatsLogger(pipeline, every=3, jsonl_path=path) as logger:
        for _ in range(2):  # two epochs of 10 batches
            for _batch in logger.track(pipeline):
                pass
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [3, 6, 9, 12, 15, 18]
    assert [line["batches"] for line in lines] == [3, 6, 9, 12, 15, 18]
    assert [line["records"] for line in lines] == [30, 60, 90, 120, 150, 180]
    assert all(line["bottleneck"] == "step" for line in lines)
    assert all(line["records_per_s"] > 0 for line in lines)
    assert set(lines[0]["ms_per_batch"]) == {
        "read",
        "validate",
        "transfer",
        "stages",
        "step",
        "compile",
        "wait",
    }


def test_track_counts_the_batch_a_loop_breaks_on(tmp_path):
    pipeline = make_pipeline()
    path = tmp_path / "stats.jsonl"
    with StatsLogger(pipeline, every=4, jsonl_path=path) as logger:
        for i, _batch in enumerate(logger.track(pipeline)):
            if i == 5:  # the loop got six batches
                break
        assert logger.steps == 6
        for _batch in logger.track(pipeline):  # the next epoch: ten more
            pass
        assert logger.steps == 16
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [4, 8, 12, 16]


def test_step_counts_several_batches_and_write_forces_a_snapshot(tmp_path):
    pipeline = make_pipeline()
    path = tmp_path / "s.jsonl"
    logger = StatsLogger(pipeline, every=4, jsonl_path=path)
    iterator = iter(pipeline)
    for _ in range(5):
        next(iterator)
    assert logger.step(3) is None  # 3 < 4
    snapshot = logger.step(2)  # 5: crossed 4
    assert snapshot is not None and snapshot["step"] == 5 and snapshot["records"] == 50
    assert logger.write()["step"] == 5
    logger.close()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [5, 5]


def test_a_step_past_several_multiples_writes_one_snapshot_appended(tmp_path):
    pipeline = make_pipeline()
    path = tmp_path / "s.jsonl"
    path.write_text('{"step": 0}\n')  # an earlier run's line: kept, the new ones after it
    with StatsLogger(pipeline, every=3, jsonl_path=path) as logger:
        assert logger.step(7)["step"] == 7  # passed 3 and 6: one snapshot, at 7
        assert logger.step(1) is None  # 8
        assert logger.step(1)["step"] == 9
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 7, 9]


def test_tensorboard_scalars_at_each_snapshot(tmp_path):
    pytest.importorskip("tensorboardX")
    pipeline = make_pipeline(n=40, batch_size=8)  # 5 batches
    with StatsLogger(pipeline, every=2, tensorboard_dir=tmp_path / "tb") as logger:
        for _batch in logger.track(pipeline):
            pass
    events = read_events(tmp_path / "tb")
    records = [(step, value) for step, tag, value in events if tag == "datarax/records"]
    assert records == [(2, 16.0), (4, 32.0)]
    tags = {tag for _, tag, _ in events}
    assert {
        "datarax/batches",
        "datarax/ms_per_batch/step",
        "datarax/seconds/wait",
        "datarax/records_per_s",
    } <= tags
    assert not any("bottleneck" in tag for tag in tags)  # text is JSON-only


def test_flatten_numbers_keeps_numbers_only():
    tree = {"a": 1, "b": {"c": 2.5, "d": "x", "e": {"f": 3}}, "g": True, "h": None}
    assert flatten_numbers(tree, "p") == {"p/a": 1.0, "p/b/c": 2.5, "p/b/e/f": 3.0}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"every": 0, "jsonl_path": "x"},
            "StatsLogger every must be an int >= 1 (batches), got 0.",
        ),
        (
            {"every": True, "jsonl_path": "x"},
            "StatsLogger every must be an int >= 1 (batches), got True.",
        ),
        (
            {},
            "StatsLogger writes nowhere: give jsonl_path='stats.jsonl' and/or "
            "tensorboard_dir='runs/data'.",
        ),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError) as info:
        StatsLogger(make_pipeline(), **kwargs)
    assert str(info.value) == message


def test_needs_a_stats_method():
    with pytest.raises(
        ConfigError, match="StatsLogger needs a pipeline with a stats\\(\\) method, got list."
    ):
        StatsLogger([], jsonl_path="x")


def test_missing_tensorboardx_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails as if not installed
    with pytest.raises(MissingExtraError) as info:
        StatsLogger(make_pipeline(), tensorboard_dir=tmp_path)
    assert str(info.value) == (
        "StatsLogger(tensorboard_dir=...) needs the optional package 'tensorboardX', which is "
        'not installed. Install it with: pip install "datarax[metrics]"'
    )


def test_a_dropped_logger_ends_its_tensorboard_thread(tmp_path):
    pytest.importorskip("tensorboardX")
    import gc
    import threading

    before = set(threading.enumerate())
    pipeline = make_pipeline()
    logger = StatsLogger(pipeline, every=1, tensorboard_dir=tmp_path / "tb")
    logger.step()
    started = set(threading.enumerate()) - before
    assert started  # the writer's thread
    del logger
    gc.collect()
    for thread in started:
        thread.join(timeout=60)
    assert not [t for t in started if t.is_alive()]


def test_a_closed_logger_refuses_to_count_instead_of_writing_nowhere(tmp_path):
    path = tmp_path / "stats.jsonl"
    with StatsLogger(make_pipeline(), every=1, jsonl_path=path) as logger:
        logger.step()
    for call in (logger.step, logger.write):
        with pytest.raises(RuntimeError, match=r"^StatsLogger is closed \(close\(\) or the end "
                           r"of its with block\); build a new StatsLogger to log again\.$"):
            call()
    assert len(path.read_text().splitlines()) == 1 and logger.steps == 1
    logger.close()  # closing again is harmless


def test_jsonl_path_in_a_folder_not_made_yet(tmp_path):
    path = tmp_path / "logs" / "run1" / "stats.jsonl"
    with StatsLogger(make_pipeline(), every=1, jsonl_path=path) as logger:
        logger.step()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["logs", "run1", "stats.jsonl"]


def test_jsonl_path_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^StatsLogger jsonl_path '.*' is a folder; give a "
                       r"file in it, e.g. jsonl_path='runs/data_stats.jsonl'\.$"):
        StatsLogger(make_pipeline(), jsonl_path=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_track_loop_left_suspended_past_close_ends_without_an_error(tmp_path):
    path = tmp_path / "stats.jsonl"
    pipeline = make_pipeline()
    with StatsLogger(pipeline, every=1, jsonl_path=path) as logger:
        batches = logger.track(pipeline)
        next(batches)
        next(batches)  # the first batch counted; the second still in the loop's hands
    batches.close()  # e.g. collected later: nothing raised, nothing written after close
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1]
    with pytest.raises(RuntimeError, match="StatsLogger is closed"):
        for _ in logger.track(pipeline):  # a loop over a closed logger: refused at its
            pass  # first batch's count
