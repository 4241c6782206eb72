"""Every MemorySource, custom-source, state and metadata example of the data-sources guide.

The examples live verbatim in examples/data_sources/; each test runs one and asserts
on the values it produced.
"""

import contextlib
import io
import runpy
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Pipeline

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "data_sources"


def run_example(name: str) -> tuple[dict, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = runpy.run_path(str(EXAMPLES / name))
    return namespace, out.getvalue()


def test_memory_source_example_prints_three_batches_and_covers_the_epoch():
    ns, printed = run_example("memory_source.py")
    assert printed.splitlines() == ["Batch shape: (10, 28, 28)"] * 3
    assert ns["i"] == 2
    np.testing.assert_array_equal(np.asarray(ns["batch"]["label"]), np.arange(20, 30) % 10)
    # The loop broke after 3 batches; the next pass is a full new epoch of 10 batches.
    labels = [np.asarray(b["label"]) for b in ns["pipeline"]]
    assert len(labels) == 10
    np.testing.assert_array_equal(np.concatenate(labels), np.arange(100) % 10)


def test_pipeline_with_operator_example_batches_every_record_once_in_order():
    ns, _ = run_example("pipeline_with_operator.py")
    batches = [np.asarray(b["x"]) for b in ns["pipeline"]]
    assert [len(b) for b in batches] == [32, 32, 32, 4]
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(100))
    assert ns["pipeline"].batch_size == 32 and len(ns["pipeline"].stages) == 1


def test_metadata_example_elements_carry_index_and_source():
    ns, _ = run_example("metadata.py")
    element = ns["element"]
    assert element.metadata.index == 9 and element.metadata.source == "MemorySource"
    assert int(element.data["label"]) == 9
    elements = list(ns["source"])  # a finished source restarts when iterated again
    assert [e.metadata.index for e in elements] == list(range(10))
    assert [int(e.data["label"]) for e in elements] == [i % 10 for i in range(10)]
    assert elements[0].data["image"].shape == (28, 28)


def test_state_management_example_tracks_position_and_resumes_on_a_fresh_source():
    ns, _ = run_example("state_management.py")
    source = ns["source"]
    assert int(ns["element"]["x"]) == 9
    state = source.get_state()
    assert state == {"current_index": 10, "current_epoch": 0}
    assert int(nnx.state(source)["datarax_position"]["index_var"].get_value()) == 10
    fresh = ns["MemorySource"](ns["MemorySourceConfig"](), [{"x": i} for i in range(100)])
    fresh.set_state(state)
    assert [int(e["x"]) for e in fresh] == list(range(10, 100))


@pytest.fixture
def csv_example(tmp_path):
    ns, _ = run_example("custom_csv_source.py")
    path = tmp_path / "rows.csv"
    rows = [[float(i), float(i) * 0.5, -float(i)] for i in range(10)]
    path.write_text("a,b,c\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))
    return ns, str(path), np.asarray(rows, np.float32)


def test_custom_csv_source_config_requires_file_path(csv_example):
    ns, _, _ = csv_example
    with pytest.raises(ValueError, match="file_path is required"):
        ns["CSVDataSourceConfig"]()


def test_custom_csv_source_contract_and_pipeline(csv_example):
    ns, path, rows = csv_example
    source = ns["CSVDataSource"](ns["CSVDataSourceConfig"](file_path=path))
    assert source.supports_indexed_access() and source.kind.value == "indexed"
    assert len(source) == 10
    spec = source.element_spec()
    assert spec["features"].shape == (3,) and spec["features"].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(source.record_indices_at(8, 4)), [8, 9, 0, 1])
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    for _ in range(2):  # two epochs, each the whole file in order
        batches = [np.asarray(b["features"]) for b in pipeline]
        assert [len(b) for b in batches] == [4, 4, 2]
        np.testing.assert_array_equal(np.concatenate(batches), rows)
    assert [e["features"].tolist() for e in source] == rows.tolist()


def test_custom_csv_source_stochastic_stage_keys_by_position(csv_example):
    from datarax.operators import ElementOperator, ElementOperatorConfig

    ns, path, _ = csv_example

    def noise(element, key):
        return element.update_data({"noise": jax.random.uniform(key)})

    def run(batch_size):
        source = ns["CSVDataSource"](ns["CSVDataSourceConfig"](file_path=path))
        op = ElementOperator(ElementOperatorConfig(stochastic=True), fn=noise)
        p = Pipeline(source=source, stages=[op], batch_size=batch_size, rngs=nnx.Rngs(0))
        return np.concatenate([np.asarray(b["noise"]) for b in p])

    np.testing.assert_array_equal(run(3), run(7))


def test_array_record_example_reads_one_epoch_per_pass(tmp_path, monkeypatch):
    from int_record_files import write_records

    target = tmp_path / "path" / "to" / "arrayrecord"
    target.mkdir(parents=True)
    rows = np.arange(70 * 3, dtype=np.float32).reshape(70, 3)
    write_records(target / "file", (row.tobytes() for row in rows))
    monkeypatch.chdir(tmp_path)  # the example names the relative path "path/to/arrayrecord/file"
    ns, _ = run_example("array_record_source.py")
    for _ in range(2):
        batches = [np.asarray(b["features"]) for b in ns["pipeline"]]
        assert [len(b) for b in batches] == [32, 32, 6]
        np.testing.assert_array_equal(np.concatenate(batches), rows)
    ns["source"].close()


def test_a_pipeline_rebuilt_over_pipeline_source_owns_its_shard_and_the_first_is_refused():
    # The quick reference rebuilds a pipeline over `pipeline.source`; a source serves one
    # share at a time, so the first pipeline, built for another share, is refused rather
    # than serving the rebuilt one's (every record, from shard 1 of 2).
    from datarax.core.errors import ConfigError
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)})
    first = Pipeline(source=source, stages=[], batch_size=4, shard_index=1, shard_count=2)
    assert [np.asarray(b["x"]).tolist() for b in first] == [[5, 6, 7, 8], [9]]
    rebuilt = Pipeline(source=first.source, stages=[], batch_size=first.batch_size)
    assert [np.asarray(b["x"]).tolist() for b in rebuilt] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ConfigError, match=r"built to serve shard 1 of 2 of its MemorySource, "
                       r"which now serves shard 0 of 1: a Pipeline built later"):
        iter(first)
    with pytest.raises(ConfigError, match="shard 1 of 2"):
        list(first.take(1))
    state = rebuilt.get_state()
    for call in (first.get_state, lambda: first.set_state(state)):  # its state is not the source's
        with pytest.raises(ConfigError, match="shard 1 of 2"):
            call()
    assert [np.asarray(b["x"]).tolist() for b in rebuilt][0] == [0, 1, 2, 3]


def test_a_live_iterator_of_a_pipeline_whose_source_was_re_sharded_is_refused():
    from datarax.core.errors import ConfigError
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(12, dtype=np.int32)})
    first = Pipeline(source=source, stages=[], batch_size=2, shard_index=0, shard_count=2)
    iterator = iter(first)
    assert np.asarray(next(iterator)["x"]).tolist() == [0, 1]
    Pipeline(source=source, stages=[], batch_size=2, shard_index=0, shard_count=2)  # same share
    assert np.asarray(next(iterator)["x"]).tolist() == [2, 3]
    Pipeline(source=source, stages=[], batch_size=2, shard_index=1, shard_count=2)
    with pytest.raises(ConfigError, match="built to serve shard 0 of 2 of its MemorySource, "
                       "which now serves shard 1 of 2"):
        next(iterator)
