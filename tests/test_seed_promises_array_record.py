"""Seed 000 (ArrayRecord quick reference), read literally: the promises of its prose and
tables that tests/sources/test_array_record_seed.py (its code blocks) and the ArrayRecord
source tests do not already check, alone and in combination.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx
from fresh_process import ROOT
from int_record_files import write_records

from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

pytest.importorskip("array_record.python.array_record_module")


def decode(record: bytes) -> dict[str, np.ndarray]:
    # the page's decode
    return {"data": np.frombuffer(record, dtype=np.float32)}


def write(path: pathlib.Path, ids: range, options: str = "group_size:1") -> str:
    """Record ``i`` of ``ids`` is ``[i, i, i]`` as float32."""
    return write_records(path, (np.full(3, i, np.float32).tobytes() for i in ids), options)


@pytest.fixture
def shards(tmp_path):
    """``train-0000{0,1,2}.riegeli`` holding records 0-29, 30-69 and 70-94; the glob."""
    for f, ids in enumerate((range(0, 30), range(30, 70), range(70, 95))):
        write(tmp_path / f"train-{f:05d}.riegeli", ids)
    return str(tmp_path / "train-*.riegeli")


def ids(batch) -> list[int]:
    return np.asarray(batch["data"])[:, 0].astype(int).tolist()


def direct(config: ArrayRecordSourceConfig, paths, records: int | None = None) -> list[int]:
    source = ArrayRecordSourceModule(config, paths, decode=decode)
    out = [int(r["data"][0]) for r in source] if records is None else [
        int(r["data"][0]) for _, r in zip(range(records), source)]
    source.close()
    return out


def test_the_last_seed_reshuffles_its_next_epoch_with_seed_zero(shards):
    # "epoch e: seed + e" with seed an int in [0, 2**32): the next epoch's seed wraps to 0
    last = ArrayRecordSourceConfig(seed=2**32 - 1, shuffle_files=True, num_epochs=2)
    epochs = direct(last, shards)
    zero = direct(ArrayRecordSourceConfig(seed=0, shuffle_files=True, num_epochs=1), shards)
    assert epochs[95:] == zero and epochs[:95] != zero
    assert sorted(epochs[:95]) == list(range(95))


def test_pipeline_passes_over_a_shuffled_glob_restore_in_a_fresh_process(shards, tmp_path):
    # shuffle + several files + a Pipeline + get_state / set_state in another process
    config = ArrayRecordSourceConfig(seed=7, shuffle_files=True)
    source = ArrayRecordSourceModule(config, shards, decode=decode, rngs=nnx.Rngs(0))
    pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))
    full = [[ids(b) for b in pipeline] for _ in range(3)]
    source.close()
    for epoch in range(3):  # pass e is the order of seed + e, records of every file mixed
        assert sum(full[epoch], []) == direct(config.replace(seed=7 + epoch, num_epochs=1), shards)
    assert {i // 30 for i in sum(full[0], [])[:10]} != {0}

    source = ArrayRecordSourceModule(config, shards, decode=decode, rngs=nnx.Rngs(0))
    pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))
    assert [ids(b) for b in pipeline] == full[0]
    iterator = iter(pipeline)
    assert [ids(next(iterator)) for _ in range(2)] == full[1][:2]
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps({"source": source.get_state(), "pipeline": iterator.get_state()}))
    iterator.close()
    source.close()
    program = f"""
import json
import numpy as np
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
def decode(record):
    return {{"data": np.frombuffer(record, dtype=np.float32)}}
def ids(batch):
    return np.asarray(batch["data"])[:, 0].astype(int).tolist()
states = json.load(open({str(saved)!r}))
config = ArrayRecordSourceConfig(seed=7, shuffle_files=True)
out = []
for kind in ("source", "pipeline"):
    source = ArrayRecordSourceModule(config, {shards!r}, decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=32)
    (source if kind == "source" else pipeline).set_state(states[kind])
    out.append([[ids(b) for b in pipeline] for _ in range(2)])
    source.close()
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu",
                                           "PYTHONPATH": str(ROOT / "src")})
    assert run.returncode == 0, run.stderr[-3000:]
    by_source, by_pipeline = json.loads(run.stdout.splitlines()[-1])
    assert by_source == by_pipeline == [full[1][2:], full[2]]


def test_a_loop_re_entered_after_a_break_is_the_next_epoch_a_restore_the_same(shards):
    # "re-entering the for batch in pipeline loop starts a new epoch", even mid-epoch;
    # a state saved at the break still resumes the rest of that epoch
    config = ArrayRecordSourceConfig(seed=3, shuffle_files=True, num_epochs=10)
    epochs = [direct(config.replace(seed=3 + e, num_epochs=1), shards) for e in range(2)]
    source = ArrayRecordSourceModule(config, shards, decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=32)
    for batch in pipeline:
        assert ids(batch) == epochs[0][:32]
        break
    state = source.get_state()
    assert (state["current_epoch"], state["current_index"]) == (0, 32)
    assert sum([ids(b) for b in pipeline], []) == epochs[1]
    source.close()
    restored = ArrayRecordSourceModule(config, shards, decode=decode)
    restored.set_state(state)
    assert sum([ids(b) for b in Pipeline(source=restored, stages=[], batch_size=32)], []) == \
        epochs[0][32:]
    restored.close()


def test_direct_iteration_runs_through_epoch_num_epochs_minus_one_counted_from_zero(tmp_path):
    paths = [write(tmp_path / "a.riegeli", range(3)), write(tmp_path / "b.riegeli", range(3, 7))]
    config = ArrayRecordSourceConfig(num_epochs=3)

    def after(state):
        source = ArrayRecordSourceModule(config, paths, decode=decode)
        source.set_state(state)
        out = [int(r["data"][0]) for r in source]
        source.close()
        return out

    assert after({"current_index": 3, "current_epoch": 1}) == [3, 4, 5, 6] + list(range(7))
    assert after({"current_index": 3, "current_epoch": 5}) == [3, 4, 5, 6]  # past the last
    assert after({"current_index": 7, "current_epoch": 2}) == list(range(7)) * 3  # starts over
    source = ArrayRecordSourceModule(config, paths, decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=4)
    for _ in range(4):  # a Pipeline ignores num_epochs: a fourth pass runs too
        assert sum([ids(b) for b in pipeline], []) == list(range(7))
    assert [int(r["data"][0]) for r in source] == list(range(7))  # epoch 4, then the end
    source.close()


def test_a_state_restores_into_a_source_of_other_threads_read_ahead_and_processes(shards):
    # num_threads / read_ahead / decode_processes are not part of what is served
    config = ArrayRecordSourceConfig(seed=11, shuffle_files=True)
    epochs = [direct(config.replace(seed=11 + e, num_epochs=1), shards) for e in range(2)]
    source = ArrayRecordSourceModule(config, shards, decode=decode, decode_processes=1,
                                     num_threads=2, read_ahead=1)
    pipeline = Pipeline(source=source, stages=[], batch_size=16)
    assert sum([ids(b) for b in pipeline], []) == epochs[0]
    iterator = iter(pipeline)
    head = [ids(next(iterator)) for _ in range(3)]
    state = json.loads(json.dumps(source.get_state()))
    iterator.close()
    source.close()
    other = ArrayRecordSourceModule(config, shards, decode=decode, num_threads=1, read_ahead=7)
    other.set_state(state)
    rest = [ids(b) for b in Pipeline(source=other, stages=[], batch_size=16)]
    assert sum(head + rest, []) == epochs[1]
    other.close()


def test_a_live_pipeline_iterator_goes_on_from_a_state_set_on_its_source(shards):
    # "source.set_state(state)  # Resumes from exact position", under a running loop too
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=5, shuffle_files=True),
                                     shards, decode=decode)
    pipeline = Pipeline(source=source, stages=[], batch_size=10)
    iterator = iter(pipeline)
    served = [ids(next(iterator)) for _ in range(2)]
    state = source.get_state()
    served.append(ids(next(iterator)))  # read past the state (and ahead of it)
    source.set_state(state)
    rest = [ids(b) for b in iterator]
    assert sum(served[:2] + rest, []) == direct(
        ArrayRecordSourceConfig(seed=5, shuffle_files=True, num_epochs=1), shards)
    source.close()


@pytest.mark.parametrize("options", ["", "group_size:100", "group_size:1,zstd:3",
                                     "group_size:1,uncompressed"])
def test_files_of_any_writer_options_serve_the_same_shuffled_records(tmp_path, options):
    # "ArrayRecord records are bytes": the writer's grouping and compression change nothing
    path = write(tmp_path / "data.riegeli", range(300), options)
    config = ArrayRecordSourceConfig(seed=1, shuffle_files=True, num_epochs=2)
    reference = write(tmp_path / "reference.riegeli", range(300))
    assert direct(config, path) == direct(config, reference)


def test_an_empty_file_among_the_files_numbers_nothing(tmp_path):
    paths = [write(tmp_path / "a.riegeli", range(3)), write(tmp_path / "empty.riegeli", range(0)),
             write(tmp_path / "b.riegeli", range(3, 7))]
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths, decode=decode)
    assert len(source) == 7
    assert [pathlib.Path(source.locate(i)[0]).name for i in (2, 3)] == ["a.riegeli", "b.riegeli"]
    assert [ids(b) for b in Pipeline(source=source, stages=[], batch_size=3)] == [
        [0, 1, 2], [3, 4, 5], [6]]
    source.close()
    shuffled = ArrayRecordSourceConfig(shuffle_files=True, num_epochs=1)
    assert sorted(direct(shuffled, paths)) == list(range(7))


def test_a_file_named_with_glob_characters_is_that_file(tmp_path):
    # one file: a path that exists is read as given, not as a pattern
    literal = write(tmp_path / "train[0].riegeli", range(5))
    write(tmp_path / "train0.riegeli", range(100, 103))  # what the pattern would match
    assert direct(ArrayRecordSourceConfig(num_epochs=1), literal) == list(range(5))
    assert direct(ArrayRecordSourceConfig(num_epochs=1), [literal]) == list(range(5))


def test_an_unknown_setting_names_the_setting_it_is_a_near_miss_of(shards):
    # a MemorySource habit (shuffle=) next to the page's shuffle_files
    with pytest.raises(ConfigError) as err:
        ArrayRecordSourceModule(paths=shards, decode=decode, shuffle=True)
    assert str(err.value).endswith("'max_skipped_fraction', 'cast_float64']. Did you mean "
                                   "shuffle_files=?")
    with pytest.raises(ConfigError) as err:  # a keyword argument's near miss: only that one
        ArrayRecordSourceModule(paths=shards, decode=decode, num_thread=2)
    assert str(err.value).endswith("'cast_float64']. Did you mean num_threads=, a keyword "
                                   "argument of ArrayRecordSourceModule (not a setting of its "
                                   "config)?")


def test_a_path_with_whitespace_around_it_says_the_file_without_it_exists(tmp_path):
    # a single file copied with its line end or a space: the message names the fix
    path = write(tmp_path / "data.riegeli", range(3))
    with pytest.raises(RecordError) as err:
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), path + " \n", decode=decode)
    assert str(err.value) == (
        f"ArrayRecordSourceModule: the file '{path} \n' does not exist. Check the path (a glob "
        f"pattern such as 'data-*.riegeli' is expanded). '{path}', without the whitespace "
        "around it, exists: drop the whitespace.")


@pytest.mark.parametrize("fields", [{0: None}, {0: None, "x": None}])
def test_a_decode_naming_a_field_by_a_non_str_is_refused_naming_it(tmp_path, fields):
    # "decode turns each bytes record into arrays for batches": a dict keyed by str, as
    # MemorySource data is (an int key was served as is; int and str together crashed)
    path = write(tmp_path / "data.riegeli", range(3))

    def keyed(record):
        return {key: np.frombuffer(record, np.float32) for key in fields}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path, decode=keyed)
    with pytest.raises(RecordError, match=r"cannot read record 0 of file '.*data\.riegeli': "
                       r"decode returned a field named by int 0; name every field with a str "
                       r"\(e\.g\. '0'\): batches are dicts keyed by str\."):
        source.element_spec()
    source.close()
