"""ArrayRecordSourceModule: config, paths, order, epochs, state, Pipeline, threads, sharding."""

from __future__ import annotations

import gc
import itertools
import json
import pathlib
import threading
import weakref

import jax
import numpy as np
import pytest
from flax import nnx
from int_record_files import runs, write_parts

from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.operators.element import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.testing import json_round_trip


def write_files(directory: pathlib.Path, sizes: list[int], stem: str = "data") -> list[str]:
    """Files of float32 records [i, -i] numbered across files."""
    return write_parts(directory, runs(sizes), lambda i: np.asarray([i, -i], np.float32).tobytes(),
                       name=stem + "-{:05d}.array_record")


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"data": np.frombuffer(record, dtype=np.float32)}


def ids(batch) -> list[int]:
    return np.asarray(batch["data"])[..., 0].astype(int).reshape(-1).tolist()


def shuffled(n: int, seed: int) -> list[int]:
    grain = pytest.importorskip("grain")
    return [grain.experimental.index_shuffle(i, max_index=n - 1, seed=seed, rounds=4) for i in range(n)]


@pytest.fixture
def files(tmp_path):
    return write_files(tmp_path, [7, 5, 8])  # 20 records in 3 files


def make(files, **config):
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), files, decode=decode,
                                   rngs=nnx.Rngs(0), num_threads=2)


# ---------------------------------------------------------------------- config
def test_config_defaults():
    c = ArrayRecordSourceConfig()
    assert (c.seed, c.num_epochs, c.shuffle_files) == (42, -1, False)
    assert (c.on_error, c.max_skipped, c.max_skipped_fraction) == ("raise", None, None)


@pytest.mark.parametrize("field, value, message", [
    ("seed", -1, "ArrayRecordSourceConfig.seed must be >= 0, got -1."),
    ("seed", 2**32, "ArrayRecordSourceConfig.seed must be < 2**32"),
    ("seed", "42", "ArrayRecordSourceConfig.seed must be an int, got str '42'."),
    ("num_epochs", 0, "ArrayRecordSourceConfig.num_epochs must be >= 1 (or -1 for passes without end), got 0."),
    ("num_epochs", -2, "ArrayRecordSourceConfig.num_epochs must be >= 1 (or -1 for passes without end), got -2."),
    ("num_epochs", True, "ArrayRecordSourceConfig.num_epochs must be an int (or -1 for passes without end), got bool True."),
    ("num_epochs", None, "ArrayRecordSourceConfig.num_epochs must be an int (or -1 for passes without end), got NoneType None."),
    ("shuffle_files", 1, "ArrayRecordSourceConfig.shuffle_files must be a bool (True/False), got int 1."),
    ("on_error", "ignore", "ArrayRecordSourceConfig: on_error must be one of ['raise', 'skip']"),
    ("max_skipped", 3, "only apply with on_error='skip'"),
])
def test_config_validation(field, value, message):
    with pytest.raises(ConfigError) as info:
        ArrayRecordSourceConfig(**{field: value})
    assert message in str(info.value)


def test_config_skip_budget_validation():
    ArrayRecordSourceConfig(on_error="skip", max_skipped=2, max_skipped_fraction=0.5)
    with pytest.raises(ConfigError, match="max_skipped must be an int >= 0 or None"):
        ArrayRecordSourceConfig(on_error="skip", max_skipped=-1)
    with pytest.raises(ConfigError, match="max_skipped_fraction must be None or a number"):
        ArrayRecordSourceConfig(on_error="skip", max_skipped_fraction=2.0)


def test_config_must_come_first(files):
    with pytest.raises(ConfigError, match="first and the ArrayRecordSourceConfig second; the "
                       "config comes first"):
        ArrayRecordSourceModule(files, ArrayRecordSourceConfig())  # type: ignore[arg-type]


# ----------------------------------------------------------------------- paths
def test_paths_single_glob_list_and_pathlib(tmp_path, files):
    assert len(make(files[1])) == 5
    src = make(str(tmp_path / "data-*.array_record"))
    assert src.paths == files and len(src) == 20
    assert make([files[2], files[0]]).paths == [files[2], files[0]]
    assert len(make(pathlib.Path(files[0]))) == 7
    assert make([str(tmp_path / "data-0000[12].array_record")]).paths == files[1:]
    assert src.locate(0) == (files[0], 0) and src.locate(7) == (files[1], 0)
    assert src.locate(19) == (files[2], 7)


def test_glob_is_sorted_not_listing_order(tmp_path):
    write_files(tmp_path, [2], stem="b")
    write_files(tmp_path, [3], stem="a")
    src = make(str(tmp_path / "*.array_record"))
    assert [pathlib.Path(p).name for p in src.paths] == ["a-00000.array_record", "b-00000.array_record"]


def test_double_star_matches_any_depth_of_folders_as_a_urls_does(tmp_path):
    # "data/**/*.array_record": every file below data/, data/ itself included, as fsspec's
    # glob of a URL lists them; a folder is not a file, and "*" stays in its own folder
    fsspec = pytest.importorskip("fsspec")
    for stem, folder in (("top", tmp_path), ("mid", tmp_path / "a"), ("deep", tmp_path / "a/b")):
        folder.mkdir(parents=True, exist_ok=True)
        write_files(folder, [2], stem=stem)
    local = make(str(tmp_path / "**" / "*.array_record"), num_epochs=1)
    names = ["a/b/deep-00000.array_record", "a/mid-00000.array_record", "top-00000.array_record"]
    assert [pathlib.Path(p).relative_to(tmp_path).as_posix() for p in local.paths] == names
    assert len(local) == 6 and len(make(str(tmp_path / "a" / "**"))) == 4
    assert [pathlib.Path(p).name for p in make(str(tmp_path / "*.array_record")).paths] == [
        "top-00000.array_record"]
    memory = fsspec.filesystem("memory")
    for name in names:
        memory.pipe(f"/globstar/{name}", (tmp_path / name).read_bytes())
    try:
        remote = make("memory://globstar/**/*.array_record", num_epochs=1)
        assert [p.split("globstar/", 1)[1] for p in remote.paths] == names
        assert [ids(b) for b in remote] == [ids(b) for b in local]
        remote.close()
    finally:
        memory.rm("/globstar", recursive=True)
    with pytest.raises(RecordError, match="the glob pattern '.*' matches no files"):
        make(str(tmp_path / "a" / "b*"))  # the folder a/b only


def test_element_spec_from_first_record(files):
    spec = make(files).element_spec()
    assert list(spec) == ["data"]
    assert spec["data"].shape == (2,) and spec["data"].dtype == np.float32


# --------------------------------------------------------------- order, epochs
def test_direct_iteration_in_file_order_with_exact_epoch_count(files):
    src = make(files, num_epochs=3)
    records = list(src)
    assert len(records) == 60
    assert [int(r["data"][0]) for r in records] == list(range(20)) * 3
    assert records[0]["data"].shape == (2,)


def test_unbounded_direct_iteration(files):
    src = make(files[:1], num_epochs=-1)
    got = [int(r["data"][0]) for r in itertools.islice(src, 7 * 5 + 2)]
    assert got == list(range(7)) * 5 + [0, 1]
    assert src.get_state()["current_epoch"] == 5


def test_shuffle_is_grain_feistel_with_seed_plus_epoch(files):
    src = make(files, seed=42, shuffle_files=True, num_epochs=3)
    got = [int(r["data"][0]) for r in src]
    assert got[:20] == shuffled(20, 42)
    assert got[20:40] == shuffled(20, 43)  # epoch 1 of seed 42 == epoch 0 of seed 43
    assert got[40:] == shuffled(20, 44)
    other = make(files, seed=43, shuffle_files=True, num_epochs=1)
    assert [int(r["data"][0]) for r in other] == got[20:40]


# ------------------------------------------------------------------------ state
def test_state_keys_and_size(tmp_path):
    big = write_files(tmp_path, [3000])
    src = make(big, shuffle_files=True)
    it = iter(src)
    next(it)
    state = src.get_state()
    assert set(state) == {"current_index", "current_epoch", "shuffled_indices", "prefetch_cache",
                          "skipped", "settings", "files"}
    assert state["current_index"] == 1 and state["current_epoch"] == 0
    assert state["shuffled_indices"] == {"seed": 42, "epoch": 0, "n": 3000}
    assert state["settings"] == {"shuffle_files": True, "seed": 42, "on_error": "raise",
                                 "files": state["files"]}
    assert isinstance(state["prefetch_cache"], int)
    assert len(json.dumps(state)) < 300
    assert make(big).get_state()["shuffled_indices"] is None
    src.close()


@pytest.mark.parametrize("shuffle", [False, True])
def test_set_state_resumes_records_mid_epoch_across_epochs_and_twice(files, shuffle):
    full = [int(r["data"][0]) for r in make(files, shuffle_files=shuffle, num_epochs=3)]
    for cut in (0, 1, 13, 19, 20, 27, 45, 56):
        src = make(files, shuffle_files=shuffle, num_epochs=3)
        head = [int(r["data"][0]) for r in itertools.islice(src, cut)]
        state = json_round_trip(src.get_state())
        resumed = make(files, shuffle_files=shuffle, num_epochs=3)
        resumed.set_state(state)
        middle = [int(r["data"][0]) for r in itertools.islice(resumed, 3)]
        again = make(files, shuffle_files=shuffle, num_epochs=3)
        again.set_state(resumed.get_state())  # resume of a resume
        tail = [int(r["data"][0]) for r in again]
        assert head + middle + tail == full, cut


def test_set_state_refuses_other_configuration(tmp_path, files):
    src = make(files, shuffle_files=True)
    next(iter(src))
    state = src.get_state()
    with pytest.raises(StateError, match="saved with seed=42") as info:
        make(files, shuffle_files=True, seed=7).set_state(state)
    assert info.value.field == "seed"
    with pytest.raises(StateError, match=r"saved with records=20 \(shuffled_indices.n\)"):
        make(files[:2], shuffle_files=True).set_state(state)
    with pytest.raises(StateError, match="shuffle_files=True but this source has shuffle_files=False") as info:
        make(files).set_state(state)
    assert info.value.field == "shuffle_files"
    with pytest.raises(StateError, match=r"'skipped' must be an int in \[0, "):
        make(files, shuffle_files=True).set_state({**state, "skipped": -1})
    with pytest.raises(StateError, match="missing 'current_index'"):
        make(files).set_state({"current_epoch": 0})
    with pytest.raises(StateError, match=r"'current_index' must be an int in \[0, 20\] "
                       r"\(records handed out of a pass of 20\), got 21"):
        make(files).set_state({"current_index": 21, "current_epoch": 0})


def test_a_bare_position_restores_into_a_shuffled_source(files):
    """``{"current_index", "current_epoch"}`` alone (the quick reference's state, its
    other keys left out) is a position: it restores as is, shuffled or not."""
    src = make(files, shuffle_files=True)
    src.set_state({"current_index": 3, "current_epoch": 1})
    assert [int(r["data"][0]) for r in itertools.islice(src, 17)] == shuffled(20, 43)[3:]
    saved = make(files, shuffle_files=True).get_state()
    with pytest.raises(StateError, match="'current_epoch' must be an int >= 0, got 'a'"):
        make(files, shuffle_files=True).set_state({**saved, "current_epoch": "a"})


# --------------------------------------------------------------------- pipeline
def test_pipeline_each_loop_is_one_epoch(files):
    src = make(files, shuffle_files=True)
    pipeline = Pipeline(source=src, stages=[], batch_size=6, rngs=nnx.Rngs(0))
    for epoch in range(3):
        batches = [ids(b) for b in pipeline]
        assert [len(b) for b in batches] == [6, 6, 6, 2]
        assert sum(batches, []) == shuffled(20, 42 + epoch)
    dropped = Pipeline(source=make(files), stages=[], batch_size=6, drop_remainder=True)
    assert sum((ids(b) for b in dropped), []) == list(range(18))


def test_pipeline_iterator_state_resume_mid_epoch_and_next_epoch(files):
    def build():
        return Pipeline(source=make(files, shuffle_files=True), stages=[], batch_size=6, rngs=nnx.Rngs(0))

    reference = build()
    epochs = [[ids(b) for b in reference] for _ in range(2)]
    for cut in range(5):
        pipeline = build()
        it = iter(pipeline)
        head = [ids(next(it)) for _ in range(cut)]
        state = json_round_trip(it.get_state())
        it.close()
        fresh = build()
        fresh_it = iter(fresh)
        fresh_it.set_state(state)
        # a state taken inside the pass (after its last batch too) continues that
        # pass: what it had left (nothing, after the last batch); the next loop is the
        # next epoch
        assert head + [ids(b) for b in fresh_it] == epochs[0], cut
        assert [ids(b) for b in fresh] == epochs[1]
        # Pipeline.set_state: the next iter() continues the saved epoch.
        other = build()
        other.set_state(state)
        assert head + [ids(b) for b in other] == epochs[0], cut


def test_source_state_resume_under_a_pipeline(files):
    src = make(files)
    pipeline = Pipeline(source=src, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    next(it), next(it)
    state = src.get_state()
    assert state["current_index"] == 8
    it.close()
    src2 = make(files)
    src2.set_state(state)
    rest = [int(r["data"][0]) for r in itertools.islice(src2, 12)]
    assert rest == list(range(8, 20))


def noise(element, key):
    return element.update_data({"data": element.data["data"] + jax.random.uniform(key, (2,))})


def test_stochastic_stage_keys_follow_stable_indices(files):
    def run(batch_size):
        op = ElementOperator(ElementOperatorConfig(stochastic=True), fn=noise)
        pipeline = Pipeline(source=make(files, shuffle_files=True), stages=[op],
                            batch_size=batch_size, rngs=nnx.Rngs(3))
        out = {}
        for batch in pipeline:
            values = np.asarray(batch["data"])
            for row in values:
                out[int(np.floor(row[0]))] = row - np.floor(row)
        return out

    a, b = run(6), run(7)
    assert sorted(a) == list(range(20))
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6)


# ------------------------------------------------------------- threads, closing
def test_no_threads_left_after_close_and_context_manager(files):
    # the threads this test starts (other tests' threads may still be ending, and their
    # garbage, collected on some thread, may start a "datarax-release" thread meanwhile;
    # this test drops its iterators on its own thread, which releases them there)
    before = set(threading.enumerate())

    def started() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in before and t.is_alive() and t.name != "datarax-release"]

    src = make(files)
    pipeline = Pipeline(source=src, stages=[], batch_size=2, rngs=nnx.Rngs(0))
    with iter(pipeline) as it:
        next(it)
        assert started()
    assert started() == []
    for batch in pipeline:
        break
    src.close()
    assert started() == []
    with pytest.raises(RuntimeError, match="closed"):
        src.get_batch(2)
    with make(files) as src2:
        assert ids({"data": src2.get_batch(3)["data"]}) == [0, 1, 2]
    assert started() == []


def test_batches_are_numpy_with_stable_indices(files):
    src = make(files, shuffle_files=True)
    src.seek(0)
    batch, indices = src.get_batch_with_indices(8)
    assert isinstance(batch["data"], np.ndarray) and batch["data"].shape == (8, 2)
    assert indices.tolist() == ids(batch) == shuffled(20, 42)[:8]


def test_shard_serves_its_block_of_the_shuffled_order(files):
    full = shuffled(20, 42)
    parts = []
    for index in range(3):
        src = make(files, shuffle_files=True, num_epochs=1)
        src.set_shard(index, 3)
        parts.append([int(r["data"][0]) for r in src])
    assert parts == [full[0:6], full[6:12], full[12:18]]


# ------------------------------------------------------------ reads and bench
def test_batched_reads_match_grain_and_travel_to_a_process(files):
    import pickle

    from grain.sources import ArrayRecordDataSource

    src = make(files)
    keys = [19, 0, 7, 6, 12, 7, 3]
    with ArrayRecordDataSource(files) as grain_source:
        grain_records = list(grain_source.__getitems__(keys))
    assert src.read_records(keys) == src.host_reader.data.__getitems__(keys) == grain_records
    copy = pickle.loads(pickle.dumps(src.host_reader.data))  # as a decode worker gets it
    assert copy.__getitems__(keys) == grain_records and len(copy) == 20
    copy.close()
    src.close()


def test_large_shuffled_order_resumes_across_shuffle_windows(tmp_path):
    from datarax.samplers import index_shuffle_np
    from datarax.sources.epoch_order import WINDOW, EpochOrder

    n = 3 * WINDOW + 123 + (1 << 16)
    order = EpochOrder(n, 11, 1, lo=5, hi=n - 7)
    ref = index_shuffle_np(np.arange(5, n - 7), n - 1, 12)
    for a, b in [(0, 256), (WINDOW - 100, WINDOW + 156), (2 * WINDOW - 1, 3 * WINDOW + 1), (n - 12 - 50, n - 12)]:
        np.testing.assert_array_equal(order.indices(a, b), ref[a:b])


@pytest.mark.slow
def test_w2_benchmark_runs_and_checks_its_epochs(tmp_path):
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path / "w2.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_array_record", "--records", "3000", "--files", "3",
         "--repeats", "1", "--only", "floor", "datarax", "grain_threads4", "--data-dir",
         str(tmp_path), "--json", str(out)],
        cwd=root, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["records_per_s"]) == {"floor", "datarax", "grain_threads4"}
    assert {"datarax_vs_floor", "datarax_vs_grain", "grain_best"} <= set(report)


def test_nnx_state_round_trip_moves_the_position(files):
    src = make(files, shuffle_files=True)
    pipeline = Pipeline(source=src, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    first = ids(next(it))
    saved = jax.tree.map(lambda v: v, nnx.state(src))  # a snapshot, not live Variables
    second = ids(next(it))
    nnx.update(src, saved)  # back to after the first batch
    assert ids(next(it)) == second
    assert first + second == shuffled(20, 42)[:8]
    assert int(saved["skipped"].get_value()) == 0
    it.close()


@pytest.mark.parametrize("processes", [0, 1], ids=["threads", "decode_processes"])
def test_a_dropped_iterator_collected_mid_epoch_of_the_next_pipeline(files, processes):
    # Two pipelines over one source in turn: the first one's iterator, left mid-epoch
    # in a reference cycle, is collected while the second reads — by whichever thread
    # the garbage collector runs on (a process pool's manager thread deadlocked there,
    # releasing in place). The second still serves exactly the rest of the epoch.
    import gc

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=1, shuffle_files=True), files,
                                     decode=decode, num_threads=2, decode_processes=processes)
    first = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    it = iter(first)
    head = ids(next(it))
    cycle = [it]
    cycle.append(cycle)  # only the garbage collector frees it now
    del it, cycle
    state = first.get_state()
    second = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    second.set_state(state)
    rest = []
    for k, batch in enumerate(second):
        rest += ids(batch)
        if k == 1:
            gc.collect()
    assert head + rest == shuffled(20, 1)
    source.close()


def test_text_a_decode_returns_comes_through_a_pipeline_as_lists_of_str(files):
    def with_text(record: bytes) -> dict:
        i = int(np.frombuffer(record, dtype=np.float32)[0])
        return {"id": np.int32(i), "name": f"record-{i}", "tags": np.array([f"t{i}", "x"])}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), files, decode=with_text)
    batches = list(Pipeline(source=source, stages=[], batch_size=8))
    names = [n for b in batches for n in b["name"]]
    assert all(isinstance(b["name"], list) for b in batches)
    assert names == [f"record-{i}" for i in range(20)]
    assert [n.tolist() for n in batches[0]["tags"][:2]] == [["t0", "x"], ["t1", "x"]]
    assert np.asarray(batches[0]["id"]).tolist() == list(range(8))

    upper = ElementOperator(fn=lambda el, key=None: {"name": el.data["name"].upper(),
                                                     "tag": el.data["tags"][0]})
    first = next(iter(Pipeline(source=source, stages=[upper], batch_size=4)))
    assert first["name"] == ["RECORD-0", "RECORD-1", "RECORD-2", "RECORD-3"]
    assert first["tag"] == ["t0", "t1", "t2", "t3"]


def test_a_dropped_source_is_freed_at_once_with_its_reader(files):
    """No reference cycle through the reader: a pipeline dropped in a notebook ends its
    read-ahead (and decode processes) at once, not at the garbage collector's next run."""
    gc.collect()
    gc.disable()
    try:
        source = make(files, shuffle_files=True, seed=1)
        pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
        with iter(pipeline) as it:
            assert len(ids(next(it))) == 4
        freed = weakref.ref(source)
        del source, pipeline, it
        assert freed() is None
    finally:
        gc.enable()
