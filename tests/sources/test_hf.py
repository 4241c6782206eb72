"""Hugging Face sources, offline: local parquet/json folders and save_to_disk datasets."""

from __future__ import annotations

import os
import sys
import textwrap

import jax
import numpy as np
import pytest
from flax import nnx

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyarrow.parquet")

from datarax.core.lengths import length_or_none  # noqa: E402
from datarax.core.errors import ConfigError, DataraxError, RecordError, StateError  # noqa: E402
from datarax.core.spec import TextSpec  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.samplers import index_shuffle_np  # noqa: E402
from datarax.sources import (  # noqa: E402
    HFEagerConfig,
    HFEagerSource,
    HFStreamingConfig,
    HFStreamingSource,
    MemorySource,
    MemorySourceConfig,
    from_hf,
)
from datarax.core.errors import MissingExtraError  # noqa: E402
from datarax.testing import json_round_trip  # noqa: E402
from hf_files import write_hub_split, write_jsonl, write_parquet  # noqa: E402

N = 100


pytestmark = pytest.mark.usefixtures("hf_offline")


def sst2_columns(n: int = N) -> dict:
    return {
        "idx": np.arange(n, dtype=np.int32),
        "sentence": [f"sentence {i}" for i in range(n)],
        "label": np.arange(n, dtype=np.int64) % 2,
    }


def write_hub_layout(root, n: int = N, files: int = 2) -> str:
    """A folder laid out like the Hub repo (data/<split>-XXXXX-of-YYYYY.parquet)."""
    write_hub_split(root, sst2_columns(n), rows_per_file=-(-n // files))
    return write_hub_split(root, sst2_columns(10), split="validation")


@pytest.fixture
def sst2_folder(tmp_path):
    return write_hub_layout(tmp_path / "sst2_local")


@pytest.fixture
def numeric_folder(tmp_path):
    """A save_to_disk DatasetDict with numeric fields only."""
    rows = {
        "x": np.arange(N * 3, dtype=np.float32).reshape(N, 3),
        "label": np.arange(N, dtype=np.int64) % 10,
    }
    ds = datasets.Dataset.from_dict(rows)
    path = tmp_path / "numeric_saved"
    datasets.DatasetDict({"train": ds, "test": ds.select(range(10))}).save_to_disk(str(path))
    return str(path)


def all_batches(pipeline):
    return [dict(b) for b in pipeline]


def ids(batches, key="idx"):
    return [int(v) for b in batches for v in np.asarray(b[key])]


# ---------------------------------------------------------------- seed example
SEED_HF = textwrap.dedent(
    '''
    from datarax.pipeline import Pipeline
    from datarax.sources import HFStreamingSource, HFStreamingConfig
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from flax import nnx

    # Stream a large dataset from HuggingFace (streaming keeps memory bounded)
    config = HFStreamingConfig(
        name="stanfordnlp/sst2",
        split="train",
        streaming=True,
    )
    train_source = HFStreamingSource(config, rngs=nnx.Rngs(0))

    # Define field extraction as an operator
    def extract_fields(element, key=None):
        return element.update_data({
            "text": element.data["sentence"],
            "label": element.data["label"]
        })

    extractor = ElementOperator(
        ElementOperatorConfig(stochastic=False),
        fn=extract_fields
    )

    # Create pipeline
    pipeline = (
        Pipeline(source=train_source, stages=[extractor], batch_size=16, rngs=nnx.Rngs(0)))

    # Iterate
    for i, batch in enumerate(pipeline):
        # Process batch
        print(f"Batch {i}: {batch['text'][:2]}...")  # Print first 2 texts
        if i >= 2:
            break
    '''
)


def test_seed_hf_streaming_example_runs_unchanged(tmp_path, monkeypatch, capsys):
    # datasets resolves a name that is an existing local folder before asking the Hub:
    # a local copy at ./stanfordnlp/sst2 (Hub layout) serves "stanfordnlp/sst2" offline.
    write_hub_layout(tmp_path / "stanfordnlp" / "sst2")
    monkeypatch.chdir(tmp_path)
    exec(compile(SEED_HF, "seed_002_hf", "exec"), {"__name__": "__seed__"})
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Batch 0: ['sentence 0', 'sentence 1']...",
        "Batch 1: ['sentence 16', 'sentence 17']...",
        "Batch 2: ['sentence 32', 'sentence 33']...",
    ]


@pytest.mark.parametrize("make", ["eager_config", "from_hf"])
def test_seed_extract_fields_example_runs_with_an_eager_source(tmp_path, monkeypatch, capsys, make):
    """The seed's example with the source swapped for HFEagerSource / from_hf (eager)."""
    write_hub_layout(tmp_path / "stanfordnlp" / "sst2")
    monkeypatch.chdir(tmp_path)
    if make == "eager_config":
        source = (
            'config = HFEagerConfig(name="stanfordnlp/sst2", split="train")\n'
            "train_source = HFEagerSource(config, rngs=nnx.Rngs(0))\n"
        )
    else:
        source = 'train_source = from_hf("stanfordnlp/sst2", "train", rngs=nnx.Rngs(0))\n'
    head, tail = SEED_HF.split("# Define field extraction as an operator")
    code = (
        "from datarax.sources import HFEagerSource, HFEagerConfig, from_hf\n"
        "from datarax.pipeline import Pipeline\n"
        "from datarax.operators import ElementOperator, ElementOperatorConfig\n"
        "from flax import nnx\n" + source + "# Define field extraction as an operator" + tail
    )
    scope = {"__name__": "__seed__"}
    exec(compile(code, "seed_002_hf_eager", "exec"), scope)
    assert isinstance(scope["train_source"], HFEagerSource)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Batch 0: ['sentence 0', 'sentence 1']...",
        "Batch 1: ['sentence 16', 'sentence 17']...",
        "Batch 2: ['sentence 32', 'sentence 33']...",
    ]
    batch = next(iter(scope["pipeline"]))
    assert batch["text"] == [f"sentence {i}" for i in range(16)]
    assert np.asarray(batch["label"]).tolist() == [i % 2 for i in range(16)]


# ------------------------------------------------------------------ streaming
def test_streaming_serves_every_record_once_per_pass(sst2_folder):
    source = HFStreamingSource(HFStreamingConfig(name=sst2_folder, split="train", chunk_size=7))
    spec = source.element_spec()
    assert spec["sentence"] == TextSpec(())
    assert spec["idx"] == jax.ShapeDtypeStruct((), np.int32)
    assert spec["label"] == jax.ShapeDtypeStruct((), np.int32)  # int64 cast, values fit
    pipeline = Pipeline(source=source, stages=[], batch_size=16, rngs=nnx.Rngs(0))
    first = all_batches(pipeline)
    assert ids(first) == list(range(N))
    assert [len(b["sentence"]) for b in first] == [16] * 6 + [4]
    assert first[0]["sentence"][:2] == ["sentence 0", "sentence 1"]
    assert isinstance(first[0]["sentence"], list)
    assert first[0]["label"].dtype == np.int32
    second = all_batches(pipeline)  # a new pass without any manual reset
    assert ids(second) == list(range(N))
    state = pipeline.get_state()  # two passes done: the start of the third
    assert (state["epoch"], state["position"]) == (2, 0)
    hash(nnx.graphdef(pipeline))  # static structure stays hashable (compiled-step caches)


def test_streaming_direct_iteration(sst2_folder):
    source = HFStreamingSource(HFStreamingConfig(name=sst2_folder, split="validation"))
    assert [int(r["idx"]) for r in source] == list(range(10))
    assert [r["sentence"] for r in source][:2] == ["sentence 0", "sentence 1"]


def test_streaming_len_says_a_stream_has_none_and_what_to_use(sst2_folder):
    source = HFStreamingSource(HFStreamingConfig(name=sst2_folder, split="validation"))
    assert length_or_none(source) is None and bool(source) is True
    with pytest.raises(TypeError) as err:
        len(source)
    assert str(err.value) == (
        "HFStreamingSource has no length: it streams the split, read forward only. For a "
        "source with a length, load the split whole: from_hf(..., streaming=False) "
        "(HFEagerSource); for the split's size alone, read the dataset's info "
        "(load_dataset_builder(name).info.splits[split].num_examples).")
    with pytest.raises(TypeError) as err:  # a pipeline over it gives the same reason
        len(Pipeline(source, batch_size=2))
    assert str(err.value) == f"len(Pipeline) is unknown: {HF_NO_LENGTH}"


HF_NO_LENGTH = (
    "HFStreamingSource has no length: it streams the split, read forward only. For a "
    "source with a length, load the split whole: from_hf(..., streaming=False) "
    "(HFEagerSource); for the split's size alone, read the dataset's info "
    "(load_dataset_builder(name).info.splits[split].num_examples).")


@pytest.mark.parametrize("shuffle", [False, True])
def test_streaming_exact_resume_mid_epoch(sst2_folder, shuffle):
    def build():
        config = HFStreamingConfig(
            name=sst2_folder, split="train", shuffle=shuffle, seed=3, chunk_size=9,
            shuffle_buffer_size=20,
        )
        return Pipeline(source=HFStreamingSource(config), stages=[], batch_size=8, rngs=nnx.Rngs(0))

    reference = build()
    full = [ids(all_batches(reference)) for _ in range(2)]
    assert sorted(full[0]) == list(range(N)) and sorted(full[1]) == list(range(N))
    if shuffle:
        assert full[0] != list(range(N)) and full[0] != full[1]

    pipeline = build()
    all_batches(pipeline)  # epoch 0
    it = iter(pipeline)  # epoch 1
    head = [next(it) for _ in range(5)]
    state = json_round_trip(it.get_state())
    assert state["source"] == {"current_index": 40, "current_epoch": 1}

    resumed = build()
    resumed.set_state(state)
    it2 = iter(resumed)
    middle = [next(it2) for _ in range(3)]
    second_state = json_round_trip(it2.get_state())  # a second resume
    twice = build()
    twice.set_state(second_state)
    assert ids(head) + ids(middle) + ids(all_batches(twice)) == full[1]
    resumed = build()
    resumed.set_state(state)
    tail = all_batches(resumed)
    assert ids(head) + ids(tail) == full[1]
    # and the pass after the resumed one is epoch 2, same as uninterrupted
    again = build()
    all_batches(again), all_batches(again)
    assert ids(all_batches(resumed)) == ids(all_batches(again))


def test_streaming_shuffle_same_seed_same_order(sst2_folder):
    def order(seed):
        config = HFStreamingConfig(name=sst2_folder, split="train", shuffle=True, seed=seed)
        return ids(all_batches(Pipeline(source=HFStreamingSource(config), stages=[], batch_size=32)))

    assert order(5) == order(5)
    assert order(5) != order(6)


def test_streaming_shards_are_disjoint_and_cover(sst2_folder):
    got = []
    for index in range(3):
        source = HFStreamingSource(HFStreamingConfig(name=sst2_folder, split="train", chunk_size=10))
        pipeline = Pipeline(source=source, stages=[], batch_size=8, shard_index=index, shard_count=3)
        got.append(ids(all_batches(pipeline)))
    # whole rounds of 3 records, shard i keeps record i of each; the partial last round
    # (record 99 of 100) is left out, so every shard serves the same number of records
    assert got[1] == list(range(1, N - 1, 3))
    assert [len(g) for g in got] == [N // 3] * 3
    assert sorted(sum(got, [])) == list(range(N - N % 3))


def test_streaming_split_slicing_and_json_files(tmp_path):
    folder = tmp_path / "jsonl"
    write_jsonl(folder / "train.jsonl",
                ({"idx": i, "text": f"t{i}", "score": [i, i + 1]} for i in range(30)))
    source = HFStreamingSource(HFStreamingConfig(name=str(folder), split="train[5:12]"))
    batches = all_batches(Pipeline(source=source, stages=[], batch_size=4))
    assert ids(batches) == list(range(5, 12))
    assert batches[0]["score"].shape == (4, 2) and batches[0]["score"].dtype == np.int32
    files = HFStreamingSource(HFStreamingConfig(data_files=str(folder / "*.jsonl"), split="train"))
    assert len(ids(all_batches(Pipeline(source=files, stages=[], batch_size=8)))) == 30
    with pytest.raises(ConfigError, match="slices by percent or from the end"):
        HFStreamingSource(HFStreamingConfig(name=str(folder), split="train[:50%]"))


def test_streaming_from_save_to_disk(numeric_folder):
    source = HFStreamingSource(HFStreamingConfig(name=numeric_folder, split="test"))
    batch = next(iter(Pipeline(source=source, stages=[], batch_size=4)))
    np.testing.assert_array_equal(np.asarray(batch["x"]), np.arange(12, dtype=np.float32).reshape(4, 3))


def test_streaming_a_save_to_disk_folder_slices_by_percent_and_from_the_end(numeric_folder):
    # the folder knows each split's size, so the stream takes the same records as eager
    split = "test[50%:]+train[-2:]"
    served = {}
    for cls, config in ((HFEagerSource, HFEagerConfig), (HFStreamingSource, HFStreamingConfig)):
        source = cls(config(name=numeric_folder, split=split))
        batches = all_batches(Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0)))
        served[cls] = [int(row[0]) // 3 for b in batches for row in np.asarray(b["x"])]
    assert served[HFStreamingSource] == served[HFEagerSource] == [5, 6, 7, 8, 9, N - 2, N - 1]


def test_streaming_state_from_longer_stream_is_refused(sst2_folder):
    source = HFStreamingSource(HFStreamingConfig(name=sst2_folder, split="validation"))
    source.set_state({"current_index": 50, "current_epoch": 0})
    with pytest.raises(StateError) as err:
        source.get_batch(4)
    assert err.value.field == "current_index"


# ---------------------------------------------------------------------- eager
def test_eager_is_an_indexed_memory_source(numeric_folder):
    source = HFEagerSource(HFEagerConfig(name=numeric_folder, split="train", shuffle=True, seed=7))
    assert isinstance(source, MemorySource) and source.supports_indexed_access()
    assert len(source) == N
    assert source.element_spec()["label"] == jax.ShapeDtypeStruct((), np.int32)
    # same order as a MemorySource over the same arrays: the Feistel permutation, seed + epoch
    rows = {"x": np.arange(N * 3, dtype=np.float32).reshape(N, 3), "label": np.arange(N, dtype=np.int32) % 10}
    memory = MemorySource(MemorySourceConfig(shuffle=True, seed=7), rows)
    for start in (0, 37, N + 5):
        np.testing.assert_array_equal(source.record_indices_at(start, 8), memory.record_indices_at(start, 8))
    expected = index_shuffle_np(np.arange(N), N - 1, 7 + 1)
    np.testing.assert_array_equal(np.asarray(source.record_indices_at(N, N)), expected)
    pipeline = Pipeline(source=source, stages=[], batch_size=32)
    xs = np.concatenate([np.asarray(b["x"])[:, 0] for b in pipeline]) / 3
    assert sorted(xs.astype(int).tolist()) == list(range(N))


def test_eager_exact_resume(numeric_folder):
    def build():
        config = HFEagerConfig(name=numeric_folder, split="train", shuffle=True, seed=1)
        return Pipeline(source=HFEagerSource(config), stages=[], batch_size=16)

    full = [np.asarray(b["x"]) for b in build()]
    pipeline = build()
    it = iter(pipeline)
    head = [np.asarray(next(it)["x"]) for _ in range(3)]
    resumed = build()
    resumed.set_state(json_round_trip(it.get_state()))
    tail = [np.asarray(b["x"]) for b in resumed]
    np.testing.assert_array_equal(np.concatenate(head + tail), np.concatenate(full))


def test_eager_split_slicing_and_parquet_folder(sst2_folder):
    config = HFEagerConfig(name=sst2_folder, split="train[10%:20%]", exclude_keys=["sentence"])
    source = HFEagerSource(config)
    assert config.exclude_keys == ("sentence",)
    assert len(source) == 10
    assert np.asarray(source.get_batch_at(0, 10)["idx"]).tolist() == list(range(10, 20))
    both = HFEagerSource(HFEagerConfig(name=sst2_folder, split="train[:3]+validation[-2:]", include_keys=("idx",)))
    assert np.asarray(both.get_batch_at(0, 5)["idx"]).tolist() == [0, 1, 2, 8, 9]


def test_eager_keeps_text_columns_on_the_host(sst2_folder):
    source = HFEagerSource(HFEagerConfig(name=sst2_folder, split="train"))
    assert source.host_data["sentence"].dtype == object
    assert source.host_data["sentence"].tolist() == [f"sentence {i}" for i in range(N)]
    assert source.data["idx"].dtype == np.int32 and source.data["idx"].tolist() == list(range(N))


@pytest.mark.parametrize("shuffle", [False, True])
def test_eager_serves_text_with_its_records(sst2_folder, shuffle):
    source = HFEagerSource(HFEagerConfig(name=sst2_folder, split="train", shuffle=shuffle, seed=3))
    assert source.element_spec()["sentence"] == TextSpec(())
    batches = all_batches(Pipeline(source=source, stages=[], batch_size=16, rngs=nnx.Rngs(0)))
    served = ids(batches)
    assert sorted(served) == list(range(N)) and (served != list(range(N))) == shuffle
    sentences = [str(s) for b in batches for s in b["sentence"]]
    assert sentences == [f"sentence {i}" for i in served]  # gathered by the same indices
    assert isinstance(batches[0]["idx"], jax.Array)  # numeric fields stay compiled


def test_fixed_size_lists_of_text_are_served_by_both_sources(tmp_path):
    folder = tmp_path / "tags"
    write_parquet(folder / "train.parquet", {"tags": [["a", "b"], ["c", "d"], ["e", "f"]],
                                             "y": [0, 1, 2]})
    for cls, config in ((HFEagerSource, HFEagerConfig), (HFStreamingSource, HFStreamingConfig)):
        source = cls(config(name=str(folder), split="train"))
        assert source.element_spec()["tags"] == TextSpec((2,))
        batches = all_batches(Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0)))
        assert [[list(tags) for tags in b["tags"]] for b in batches] == [
            [["a", "b"], ["c", "d"]],
            [["e", "f"]],
        ], cls.__name__


# ------------------------------------------------------------------ bad input
def test_unknown_dataset_name():
    for cls, config in ((HFEagerSource, HFEagerConfig), (HFStreamingSource, HFStreamingConfig)):
        with pytest.raises(DataraxError) as err:
            cls(config(name="no-such-org/no-such-dataset", split="train"))
        assert str(err.value) == (
            f"{cls.__name__}: dataset 'no-such-org/no-such-dataset' was not found: it is "
            "not a local folder or data file, and the Hugging Face Hub does not have it or "
            "cannot be reached (offline). Pass a Hub id, a local dataset folder (e.g. one "
            "written by save_to_disk) or data files."
        )


@pytest.mark.parametrize("streaming", [False, True])
def test_unknown_split(sst2_folder, streaming):
    cls, config = (HFStreamingSource, HFStreamingConfig) if streaming else (HFEagerSource, HFEagerConfig)
    with pytest.raises(DataraxError) as err:
        cls(config(name=sst2_folder, split="tset", exclude_keys=("sentence",)))
    assert str(err.value) == (
        f"{cls.__name__}: split 'tset' is not in dataset {sst2_folder!r}; its splits are "
        "['train', 'validation']."
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_missing_column_in_keys(sst2_folder, streaming):
    cls, config = (HFStreamingSource, HFStreamingConfig) if streaming else (HFEagerSource, HFEagerConfig)
    with pytest.raises(ConfigError) as err:
        cls(config(name=sst2_folder, split="train", include_keys=("idx", "lable")))
    assert str(err.value) == (
        f"{cls.__name__}: include_keys names field(s) ['lable'] that the dataset does not "
        "have; its fields are ['idx', 'sentence', 'label']."
    )
    with pytest.raises(ConfigError) as err:
        cls(config(name=sst2_folder, split="train", exclude_keys=("text",)))
    assert str(err.value) == (
        f"{cls.__name__}: exclude_keys names field(s) ['text'] that the dataset does not "
        "have; its fields are ['idx', 'sentence', 'label']."
    )


@pytest.mark.parametrize("split", ["train[:0]", "train[1000000:]"])  # empty; past the end
@pytest.mark.parametrize("streaming", [False, True])
def test_empty_split(sst2_folder, streaming, split):
    cls, config = (HFStreamingSource, HFStreamingConfig) if streaming else (HFEagerSource, HFEagerConfig)
    with pytest.raises(DataraxError) as err:
        cls(config(name=sst2_folder, split=split, exclude_keys=("sentence",)))
    assert str(err.value) == (
        f"{cls.__name__}: split '{split}' of dataset {sst2_folder!r} holds no records; "
        "pick a split (or slice) that has some."
    )


def test_64bit_policy(tmp_path):
    big = tmp_path / "big"
    write_parquet(big / "train.parquet",
                  {"id": np.array([1, 2, 2**40], np.int64), "w": np.array([0.5, 1.5, 2.5])})
    with pytest.raises(ConfigError) as err:
        HFEagerSource(HFEagerConfig(name=str(big), split="train", exclude_keys=("id",)))
    assert str(err.value) == (
        "HFEagerSource: field 'w' is float64 but jax_enable_x64 is off, and datarax never "
        "narrows silently. Set cast_float64=True in the config to cast it to float32, "
        "enable x64 with jax.config.update('jax_enable_x64', True), or drop the field "
        "(exclude_keys)."
    )
    cast = HFEagerSource(HFEagerConfig(name=str(big), split="train", exclude_keys=("id",), cast_float64=True))
    assert cast.element_spec()["w"].dtype == np.float32
    with pytest.raises(RecordError) as err:
        HFEagerSource(HFEagerConfig(name=str(big), split="train", include_keys=("id",)))
    assert str(err.value) == (
        "HFEagerSource: field 'id' is int64 and record 2 holds 1099511627776, outside the "
        "int32 range, so it cannot be cast to int32 without loss while "
        "jax_enable_x64 is off. Enable x64 with jax.config.update('jax_enable_x64', True), "
        "or drop the field (exclude_keys)."
    )
    assert err.value.index == 2
    stream = HFStreamingSource(HFStreamingConfig(name=str(big), split="train", include_keys=("id",), chunk_size=2))
    assert stream.get_batch(2)["id"].tolist() == [1, 2]
    with pytest.raises(RecordError, match="record 2 holds 1099511627776, outside the int32 range"):
        stream.get_batch(2)


def test_missing_extra_names_pip_command(monkeypatch, sst2_folder):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingExtraError) as err:
        HFStreamingSource(HFStreamingConfig(name=sst2_folder))
    assert str(err.value) == (
        "HFStreamingSource needs the optional package 'datasets', which is not installed. "
        'Install it with: pip install "datarax[hf]"'
    )


def test_config_validation():
    with pytest.raises(ConfigError, match="must be True; use HFEagerConfig"):
        HFStreamingConfig(name="x", streaming=False)
    with pytest.raises(ConfigError, match="must be False; use HFStreamingConfig"):
        HFEagerConfig(name="x", streaming=True)
    with pytest.raises(ConfigError, match="needs name="):
        HFEagerConfig()
    with pytest.raises(ConfigError) as err:
        HFEagerConfig(name="x", include_keys="label")
    assert str(err.value) == (
        "HFEagerConfig.include_keys must be None or an iterable of field names (a list, "
        "tuple or set), got the single string 'label'; wrap it: include_keys=('label',)."
    )


# -------------------------------------------------------------------- factory
def test_from_hf_chooses(sst2_folder, numeric_folder):
    assert isinstance(from_hf(sst2_folder, "train", streaming=True, rngs=nnx.Rngs(0)), HFStreamingSource)
    eager = from_hf(sst2_folder, "train", streaming=False, exclude_keys=("sentence",))
    assert isinstance(eager, HFEagerSource)
    # automatic: a small split -> eager, text fields included (kept on the host)
    assert isinstance(from_hf(sst2_folder, "train"), HFEagerSource)
    assert isinstance(from_hf(numeric_folder, "train"), HFEagerSource)
    assert isinstance(from_hf(numeric_folder, "train", chunk_size=8), HFStreamingSource)


# the core import without datasets (nor tensorflow_datasets): tests/sources/
# test_extras_offline.py, in its one fresh process without the optional packages


@pytest.mark.slow  # a fresh interpreter importing datasets and JAX
def test_a_run_that_stops_mid_pass_exits_without_a_traceback(sst2_folder):
    # training for a number of steps leaves the stream's pass open at exit; datasets'
    # parquet reader, closed only as the interpreter tears its modules down, printed
    # "Exception ignored in: <generator object Parquet._generate_tables ...>"
    code = textwrap.dedent(f"""
        from datarax.pipeline import Pipeline
        from datarax.sources import HFStreamingConfig, HFStreamingSource
        for shuffle in (False, True):
            config = HFStreamingConfig(name={sst2_folder!r}, split="train", shuffle=shuffle,
                                       chunk_size=4, shuffle_buffer_size=8)
            batches = iter(Pipeline(source=HFStreamingSource(config), stages=[], batch_size=2))
            print(len(next(batches)["sentence"]))
    """)
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_image_features_are_decoded(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=3)})
    rows = {"image": [np.full((5, 4), i, np.uint8) for i in range(12)], "label": [i % 3 for i in range(12)]}
    path = str(tmp_path / "images")
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(path)
    eager = HFEagerSource(HFEagerConfig(name=path, split="train", shuffle=True))
    assert eager.element_spec()["image"] == jax.ShapeDtypeStruct((5, 4), np.uint8)
    batch = eager.get_batch_at(0, 12)
    np.testing.assert_array_equal(np.asarray(batch["image"])[:, 0, 0], np.asarray(eager.record_indices_at(0, 12)))
    stream = HFStreamingSource(HFStreamingConfig(name=path, split="train", chunk_size=5))
    got = [np.asarray(b["image"]) for b in Pipeline(source=stream, stages=[], batch_size=8)]
    np.testing.assert_array_equal(np.concatenate(got)[:, 2, 3], np.arange(12))


def test_streaming_shuffle_orders_files_and_bounds_the_buffer(sst2_folder):
    firsts = set()
    for seed in range(8):
        config = HFStreamingConfig(name=sst2_folder, split="train", shuffle=True, seed=seed,
                                   shuffle_buffer_size=4, chunk_size=2)
        order = ids(all_batches(Pipeline(source=HFStreamingSource(config), stages=[], batch_size=10)))
        assert sorted(order) == list(range(N))
        # files are read one after another: with a 4-record buffer the first 40 records
        # handed out all come from the file read first
        file_start = 0 if order[0] < 50 else 50
        firsts.add(file_start)
        assert all(file_start <= i < file_start + 50 for i in order[:40])
        assert order[:40] != sorted(order[:40])
    assert firsts == {0, 50}  # both files get to go first, depending on the seed


def test_x64_on_keeps_64bit_fields(numeric_folder):
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        source = HFEagerSource(HFEagerConfig(name=numeric_folder, split="test"))
        assert source.element_spec()["label"] == jax.ShapeDtypeStruct((), np.int64)
    finally:
        jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize("arrow_type", ["date32", "timestamp", "decimal"])
@pytest.mark.parametrize("streaming", [False, True])
def test_a_column_that_is_not_numbers_or_text_is_refused_naming_it(tmp_path, streaming,
                                                                    arrow_type):
    column = {"date32": pa.array([0, 1, 2], pa.date32()),
              "timestamp": pa.array([0, 1, 2], pa.timestamp("ms")),
              "decimal": pa.array([1, 2, 3], pa.decimal128(5, 2))}[arrow_type]
    write_hub_split(tmp_path, {"id": [0, 1, 2], "when": column})
    cls, config = (HFStreamingSource, HFStreamingConfig) if streaming else (HFEagerSource, HFEagerConfig)
    with pytest.raises(DataraxError) as err:  # a stream's was JAX's TypeError at the first batch
        cls(config(name=str(tmp_path), split="train"))
    assert str(err.value).startswith(f"{cls.__name__}: field 'when' has Arrow type {column.type}")
    assert str(err.value).endswith(
        "which datarax cannot turn into an array of numbers; convert it first (e.g. dates "
        "and times to int64 counts) or drop it (exclude_keys)."
    )


def _folder_with_a_corrupt_shard(tmp_path):
    write_parquet(tmp_path / "data" / "train-00000-of-00002.parquet", {"x": np.arange(8)})
    (tmp_path / "data" / "train-00001-of-00002.parquet").write_bytes(b"not parquet" * 20)
    return str(tmp_path)


def test_eager_a_corrupt_data_file_is_named_as_such_not_as_a_missing_dataset(tmp_path):
    folder = _folder_with_a_corrupt_shard(tmp_path)
    with pytest.raises(DataraxError) as err:
        HFEagerSource(HFEagerConfig(name=folder, split="train"))
    message = str(err.value)
    assert message.startswith(f"HFEagerSource: cannot load dataset {folder!r}: ArrowInvalid: ")
    assert message.endswith("A data file may be corrupt, truncated, not in the format its "
                            "extension says, or hold a column of another type than the first "
                            "file's; fix or remove it.")
    assert "was not found" not in message


@pytest.mark.parametrize("streaming", [False, True])
def test_a_folder_of_empty_data_files_is_named_as_empty(tmp_path, streaming):
    """datasets' own error for a folder whose data files are all empty is a bare
    StopIteration; the files are named as empty instead (a non-empty file beside an empty
    one reads as before)."""
    from datarax.sources import from_hf

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"")
    (folder / "b.jsonl").write_bytes(b"")
    with pytest.raises(DataraxError, match=r"every data file is empty \('.*a\.jsonl', "
                                           r"'.*b\.jsonl'\), so it holds no records") as err:
        from_hf(str(folder), "train", streaming=streaming)
    assert "StopIteration" not in str(err.value)
    (folder / "b.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    source = from_hf(str(folder), "train", streaming=streaming)
    assert sorted(int(r["x"]) for r in source)[:2] == [1, 2]


def test_a_column_of_another_type_in_a_later_file_reads_as_sentences(tmp_path):
    """Arrow's own message ends without a full stop: the hint starts a new sentence."""
    write_parquet(tmp_path / "data" / "train-00000-of-00002.parquet", {"text": np.arange(3)})
    write_parquet(tmp_path / "data" / "train-00001-of-00002.parquet", {"text": ["a", "b"]})
    cause = "ArrowInvalid: Failed to parse string: '[ab]' as a scalar of type int64. A data file"
    with pytest.raises(DataraxError, match=f"cannot load dataset .*: {cause}"):
        HFEagerSource(HFEagerConfig(name=str(tmp_path), split="train"))
    stream = HFStreamingSource(HFStreamingConfig(name=str(tmp_path), split="train", chunk_size=2))
    with pytest.raises(RecordError, match=f"after 2 records: {cause}"):
        list(Pipeline(source=stream, stages=[], batch_size=2))


@pytest.mark.parametrize("chunk_size", [4, 100])  # the bad file met in a pass / when built
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_streaming_a_corrupt_data_file_is_a_record_error_naming_the_split(tmp_path, on_error,
                                                                          chunk_size):
    folder = _folder_with_a_corrupt_shard(tmp_path)
    with pytest.raises(RecordError) as err:  # was pyarrow's ArrowInvalid
        source = HFStreamingSource(HFStreamingConfig(
            name=folder, split="train", chunk_size=chunk_size, on_error=on_error))
        list(Pipeline(source=source, stages=[], batch_size=4))
    message = str(err.value)
    assert message.startswith(
        f"HFStreamingSource: cannot read split 'train' of dataset {folder!r} (epoch 0) after "
    )
    assert "ArrowInvalid: " in message


def test_from_hf_names_an_unknown_option(tmp_path):
    with pytest.raises(ConfigError) as err:  # was TypeError naming HFStreamingConfig.__init__
        from_hf(str(tmp_path), "train", chunksize=4)
    assert str(err.value).startswith(
        "from_hf got unknown option(s) ['chunksize']; the config options are ['cast_float64', "
        "'chunk_size', ")


def test_local_paths_may_be_pathlib_paths(sst2_folder, numeric_folder):
    import pathlib

    folder = pathlib.Path(sst2_folder)
    config = HFEagerConfig(name=folder, split="train[:3]", data_dir=pathlib.Path("data"))
    assert (config.name, config.data_dir) == (sst2_folder, "data")
    assert config == HFEagerConfig(name=sst2_folder, split="train[:3]", data_dir="data")
    assert np.asarray(HFEagerSource(config).get_batch_at(0, 3)["idx"]).tolist() == [0, 1, 2]

    files = sorted((folder / "data").glob("train-*.parquet"))
    stream = HFStreamingConfig(name="parquet", data_files=files)
    assert stream.data_files == tuple(str(f) for f in files)
    source = HFStreamingSource(stream)
    assert sorted(int(r["idx"]) for r in source) == list(range(N))

    eager = from_hf(pathlib.Path(numeric_folder), "test", streaming=False)
    assert len(eager) == 10 and eager.config.name == numeric_folder


def test_a_parquet_data_file_with_no_rows_adds_nothing(hf_offline, tmp_path):
    # a shard written empty (a filter that kept nothing): datasets read it in batches of
    # 0 rows (ArrowInvalid) unless given a batch size
    write_parquet(tmp_path / "part-0.parquet", {"label": np.arange(3)})
    write_parquet(tmp_path / "part-1.parquet", {"label": np.zeros(0, np.int64)})
    write_parquet(tmp_path / "part-2.parquet", {"label": np.arange(3, 5)})
    pattern = str(tmp_path / "part-*.parquet")
    eager = HFEagerSource(HFEagerConfig(name="parquet", data_files=pattern, split="train"))
    assert np.asarray(eager.get_batch_at(0, 5)["label"]).tolist() == [0, 1, 2, 3, 4]
    stream = HFStreamingSource(HFStreamingConfig(name=pattern, split="train"))
    assert [int(r["label"]) for r in stream] == [0, 1, 2, 3, 4]
