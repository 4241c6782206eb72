"""TFDS sources, offline: tfds.testing.mock_data and small datasets built in tmp dirs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from flax import nnx

tfds = pytest.importorskip("tensorflow_datasets")

from datarax.core.errors import ConfigError, DataraxError, RecordError  # noqa: E402
from datarax.core.spec import TextSpec  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.samplers import index_shuffle_np  # noqa: E402
from datarax.sources import (  # noqa: E402
    MemorySource,
    TFDSEagerConfig,
    TFDSEagerSource,
    TFDSStreamingConfig,
    TFDSStreamingSource,
    from_tfds,
)
from datarax.core.errors import MissingExtraError  # noqa: E402
from datarax.testing import json_round_trip  # noqa: E402
from tfds_datasets import prepare  # noqa: E402

N = 20


def _tiny_example(i: int) -> dict:
    return {
        "image": np.full((4, 4), i, np.uint8),
        "label": i % 10,
        "text": f"t{i}",
        "meta": {"w": np.float32(i) / 2},
    }


def tiny(root, file_format="array_record") -> str:
    """datarax_tiny: 20 train / 5 test records: image, label (ClassLabel, int64), text,
    nested meta/w."""
    features = {
        "image": tfds.features.Tensor(shape=(4, 4), dtype=np.uint8),
        "label": tfds.features.ClassLabel(num_classes=10),
        "text": tfds.features.Text(),
        "meta": {"w": tfds.features.Tensor(shape=(), dtype=np.float32)},
    }
    splits = {"train": {i: _tiny_example(i) for i in range(N)},
              "test": {i: _tiny_example(i) for i in range(N, N + 5)}}
    return prepare(root, "DataraxTiny", features, splits, file_format)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tiny(tmp_path_factory.mktemp("tfds_data"))
    # 64-bit fields: big int64 (one value past int32) and a float64
    prepare(root, "DataraxWide", {
        "big": tfds.features.Tensor(shape=(), dtype=np.int64),
        "small": tfds.features.Tensor(shape=(), dtype=np.int64),
        "f64": tfds.features.Tensor(shape=(), dtype=np.float64),
    }, {"train": {i: {"big": 2**40 if i == 2 else i, "small": i, "f64": i / 4} for i in range(4)}})
    # a Sequence feature whose length varies by record (0, 1, 2), beside a fixed one
    prepare(root, "DataraxRagged", {
        "seq": tfds.features.Sequence(tfds.features.Tensor(shape=(), dtype=np.int32)),
        "id": tfds.features.Tensor(shape=(), dtype=np.int32),
        # a string Tensor (not Text): raw bytes, e.g. an encoded file
        "raw": tfds.features.Tensor(shape=(), dtype=np.str_),
    }, {"train": {i: {"seq": list(range(i)), "id": i, "raw": bytes([0xFF, 0xD8, i])}
                  for i in range(3)}})
    # an Image feature: TFDS decodes its PNGs with Pillow (or OpenCV) when reading
    prepare(root, "DataraxPictures", {"picture": tfds.features.Image(shape=(3, 2, 3))},
            {"train": {i: {"picture": np.full((3, 2, 3), 40 * i, np.uint8)} for i in range(3)}})
    return root


@pytest.fixture(scope="module")
def tfrecord_dir(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("tfds_tfrecord"), file_format="tfrecord")


def eager(data_dir, **kw):
    kw.setdefault("exclude_keys", ("text",))
    return TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir=data_dir, **kw))


def stream(data_dir, **kw):
    return TFDSStreamingSource(TFDSStreamingConfig(name="datarax_tiny", data_dir=data_dir, **kw))


def values(batches, key="image"):
    return [int(v) for b in batches for v in np.asarray(b[key])[:, 0, 0]]


# ---------------------------------------------------------------- seed example
SEED_TFDS = textwrap.dedent(
    '''
    from datarax.pipeline import Pipeline
    from datarax.sources import TFDSEagerSource, TFDSEagerConfig
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from flax import nnx

    # Load MNIST from TensorFlow Datasets
    config = TFDSEagerConfig(name="mnist", split="train")
    train_source = TFDSEagerSource(config)

    # Define normalization as an operator
    def normalize(element, key=None):
        img = element.data["image"]
        # Normalize to [0, 1] range
        return element.update_data({"image": img / 255.0})

    normalizer = ElementOperator(
        ElementOperatorConfig(stochastic=False),
        fn=normalize
    )

    # Create training pipeline
    train_pipeline = (
        Pipeline(source=train_source, stages=[normalizer], batch_size=32, rngs=nnx.Rngs(0)))

    # Iterate
    for i, batch in enumerate(train_pipeline):
        # Train model
        print(f"Batch {i}: {batch['image'].shape}")
        if i >= 2:
            break
    '''
)


def test_seed_tfds_mnist_example_runs_unchanged(capsys):
    # tfds.testing.mock_data serves generated MNIST-shaped records through
    # tfds.data_source (the path TFDSEagerSource reads), offline.
    with tfds.testing.mock_data(num_examples=100):
        exec(compile(SEED_TFDS, "seed_002_tfds", "exec"), {"__name__": "__seed__"})
    assert capsys.readouterr().out.splitlines() == [
        "Batch 0: (32, 28, 28, 1)",
        "Batch 1: (32, 28, 28, 1)",
        "Batch 2: (32, 28, 28, 1)",
    ]


def test_seed_best_practice_shuffle_line():
    with tfds.testing.mock_data(num_examples=50):
        source = TFDSEagerSource(TFDSEagerConfig(name="mnist", split="train", shuffle=True, seed=42))
        batches = list(Pipeline(source=source, stages=[], batch_size=16))
    assert [b["image"].shape[0] for b in batches] == [16, 16, 16, 2]
    assert batches[0]["image"].dtype == np.uint8 and batches[0]["label"].dtype == np.int32
    expected = index_shuffle_np(np.arange(50), 49, 42)
    np.testing.assert_array_equal(np.asarray(source.record_indices_at(0, 50)), expected)


# ---------------------------------------------------------------------- eager
def test_eager_loads_split_as_memory_source(data_dir):
    source = eager(data_dir)
    assert isinstance(source, MemorySource) and len(source) == N
    assert source.element_spec() == {
        "image": jax.ShapeDtypeStruct((4, 4), np.uint8),
        "label": jax.ShapeDtypeStruct((), np.int32),
        "meta/w": jax.ShapeDtypeStruct((), np.float32),
    }
    batches = list(Pipeline(source=source, stages=[], batch_size=8))
    images = values(batches)
    assert sorted(images) == list(range(N))
    labels = [int(v) for b in batches for v in np.asarray(b["label"])]
    assert labels == [i % 10 for i in images]
    np.testing.assert_allclose(np.concatenate([b["meta/w"] for b in batches]), np.array(images) / 2)


def test_eager_and_streaming_serve_the_same_shuffled_order(data_dir):
    e = list(Pipeline(source=eager(data_dir, shuffle=True, seed=9), stages=[], batch_size=6))
    s = list(Pipeline(source=stream(data_dir, shuffle=True, seed=9, exclude_keys=("text",)), stages=[], batch_size=6))
    assert values(e) == values(s)
    assert sorted(values(e)) == list(range(N)) and values(e) != sorted(values(e))


def test_tfds_sources_take_their_settings_as_keywords_name_being_the_datasets(data_dir):
    kw = dict(data_dir=data_dir, shuffle=True, seed=9, exclude_keys=("text",))
    e = TFDSEagerSource(name="datarax_tiny", **kw)
    s = TFDSStreamingSource(name="datarax_tiny", **kw)
    assert e.config == eager(data_dir, shuffle=True, seed=9).config and e.name == "TFDSEagerSource"
    assert s.config == TFDSStreamingConfig(name="datarax_tiny", **kw)
    assert (values(Pipeline(source=e, stages=[], batch_size=6))
            == values(Pipeline(source=s, stages=[], batch_size=6))
            == values(Pipeline(source=eager(data_dir, shuffle=True, seed=9), stages=[],
                               batch_size=6)))


def test_eager_exact_resume(data_dir):
    def build():
        return Pipeline(source=eager(data_dir, shuffle=True, seed=3), stages=[], batch_size=6)

    full = values(list(build()))
    it = iter(build())
    head = [next(it) for _ in range(2)]
    resumed = build()
    resumed.set_state(json_round_trip(it.get_state()))
    assert values(head) + values(list(resumed)) == full


def test_eager_keeps_text_columns_on_the_host(data_dir):
    source = TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir=data_dir))
    assert source.host_data["text"].dtype == object
    images = np.asarray(source.data["image"])[:, 0, 0].tolist()
    assert source.host_data["text"].tolist() == [f"t{i}" for i in images]


def test_eager_serves_text_with_its_records(data_dir):
    source = TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir=data_dir, shuffle=True))
    batches = list(Pipeline(source=source, stages=[], batch_size=8))
    texts = [str(t) for b in batches for t in b["text"]]
    assert texts == [f"t{i}" for i in values(batches)]
    assert sorted(values(batches)) == list(range(N))


def test_split_slicing(data_dir):
    assert len(eager(data_dir, split="train[:5]")) == 5
    assert len(eager(data_dir, split="test")) == 5
    assert len(stream(data_dir, split="train[50%:]")) == 10


# ------------------------------------------------------------------ streaming
def test_streaming_pass_text_and_new_epoch(data_dir):
    source = stream(data_dir, num_threads=2)
    spec = source.element_spec()
    assert spec["text"] == TextSpec(()) and spec["label"] == jax.ShapeDtypeStruct((), np.int32)
    pipeline = Pipeline(source=source, stages=[], batch_size=8)
    first = list(pipeline)
    assert [len(b["text"]) for b in first] == [8, 8, 4]
    assert isinstance(first[0]["text"], list) and isinstance(first[0]["text"][0], str)
    assert [b["text"] for b in first] == [[f"t{i}" for i in values([b])] for b in first]
    second = list(pipeline)
    assert values(second) == values(first)  # unshuffled: same file order every pass
    hash(nnx.graphdef(pipeline))  # static structure stays hashable (compiled-step caches)


def test_streaming_source_reads_one_record_by_index_as_its_batches_hold_it(data_dir):
    # a RandomAccessSource's source[i] (Grain's data-source read): it raised a RecordError
    # ("must implement read_records", "fix or regenerate the file") on a good split
    source = stream(data_dir, shuffle=True, seed=3)
    batch = Pipeline(source=stream(data_dir), stages=[], batch_size=N).__iter__().__next__()
    for i in (0, 7, -1):
        record = source[i]  # stable (file) order, whatever the shuffle
        assert int(record["image"][0, 0]) == values([batch])[i]
        assert record["text"] == batch["text"][i] and record["label"].dtype == np.int32
    assert source.get_state()["current_index"] == 0  # no position moved
    source.close()
    with pytest.raises(RuntimeError, match="TFDSStreamingSource is closed; build a new source"):
        source[0]


def test_streaming_exact_resume_across_epochs(data_dir):
    def build():
        return Pipeline(source=stream(data_dir, shuffle=True, seed=1), stages=[], batch_size=6)

    reference = build()
    full = [values(list(reference)) for _ in range(2)]
    assert full[0] != full[1]
    pipeline = build()
    list(pipeline)
    it = iter(pipeline)
    head = [next(it) for _ in range(2)]
    state = json_round_trip(it.get_state())
    state["source"].pop("prefetch_cache")  # information only: how far read-ahead got
    assert state["source"] == {"current_index": 12, "current_epoch": 1, "skipped": 0}
    resumed = build()
    resumed.set_state(state)
    assert values(head) + values(list(resumed)) == full[1]


def test_streaming_shards(data_dir):
    parts = []
    for index in range(2):
        pipeline = Pipeline(source=stream(data_dir, shuffle=True, seed=2), stages=[], batch_size=4,
                            shard_index=index, shard_count=2)
        parts.append(values(list(pipeline)))
    assert len(parts[0]) == len(parts[1]) == N // 2
    assert sorted(parts[0] + parts[1]) == list(range(N))


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("cls,config", [(TFDSEagerSource, TFDSEagerConfig), (TFDSStreamingSource, TFDSStreamingConfig)])
def test_unknown_dataset_name(cls, config, tmp_path):
    with pytest.raises(DataraxError) as err:
        cls(config(name="no_such_dataset_xyz", split="train", data_dir=str(tmp_path), download=False))
    assert str(err.value) == (
        f"{cls.__name__}: TFDS has no dataset named 'no_such_dataset_xyz' (not in its "
        f"catalog or in data_dir={str(tmp_path)!r}). Check the spelling (see "
        "tfds.list_builders()), or pass data_dir= pointing at the folder holding the "
        "prepared dataset."
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_unknown_split(data_dir, streaming):
    make, name = (stream, "TFDSStreamingSource") if streaming else (eager, "TFDSEagerSource")
    with pytest.raises(DataraxError) as err:
        make(data_dir, split="validation")
    assert str(err.value) == (
        f"{name}: split 'validation' is not in dataset 'datarax_tiny'; its splits are "
        "['test', 'train']."
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_missing_column_in_keys(data_dir, streaming):
    make, name = (stream, "TFDSStreamingSource") if streaming else (eager, "TFDSEagerSource")
    with pytest.raises(ConfigError) as err:
        make(data_dir, include_keys=("image", "labels"), exclude_keys=None)
    assert str(err.value) == (
        f"{name}: include_keys names field(s) ['labels'] that the dataset does not have; "
        "its fields are ['image', 'label', 'text', 'meta/w']."
    )
    with pytest.raises(ConfigError) as err:
        make(data_dir, exclude_keys=("txt",))
    assert str(err.value) == (
        f"{name}: exclude_keys names field(s) ['txt'] that the dataset does not have; "
        "its fields are ['image', 'label', 'text', 'meta/w']."
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_a_field_of_varying_length_is_named_with_the_fix(data_dir, streaming):
    # a TFDS Sequence declares shape (None,): the records cannot be batched, and
    # skipping them (the usual advice for a bad record) would drop most of the split
    cls, cfg = ((TFDSStreamingSource, TFDSStreamingConfig) if streaming
                else (TFDSEagerSource, TFDSEagerConfig))
    with pytest.raises(RecordError) as err:
        next(iter(Pipeline(source=cls(cfg(name="datarax_ragged", data_dir=data_dir)),
                           stages=[], batch_size=3)))
    message = str(err.value)
    assert message.startswith(f"{cls.__name__}: cannot read record ")
    assert message.endswith(
        "The dataset declares 'seq' with shape (None,), which varies by record, and a batch "
        "needs one shape per field: pad or resize it to one shape when preparing the dataset, "
        "or drop it (exclude_keys=('seq',))."
    )
    assert "on_error='skip'" not in message
    source = cls(cfg(name="datarax_ragged", data_dir=data_dir, exclude_keys=("seq",)))
    batch = next(iter(Pipeline(source=source, stages=[], batch_size=3)))
    assert sorted(np.asarray(batch["id"]).tolist()) == [0, 1, 2]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_string_tensor_that_is_not_text_is_served_as_bytes(data_dir, streaming):
    # only Text features are decoded to str; a string Tensor holding bytes that are not
    # UTF-8 (an encoded image, a serialized proto) is served as TFDS gives it
    cls, cfg = ((TFDSStreamingSource, TFDSStreamingConfig) if streaming
                else (TFDSEagerSource, TFDSEagerConfig))
    source = cls(cfg(name="datarax_ragged", data_dir=data_dir, exclude_keys=("seq",)))
    batch = next(iter(Pipeline(source=source, stages=[], batch_size=3)))
    ids = np.asarray(batch["id"]).tolist()
    assert list(batch["raw"]) == [bytes([0xFF, 0xD8, i]) for i in ids]


@pytest.mark.parametrize("split", ["train[:0]", "train[4:2]"])  # empty; ends before it starts
@pytest.mark.parametrize("streaming", [False, True])
def test_empty_split(data_dir, streaming, split):
    make, name = (stream, "TFDSStreamingSource") if streaming else (eager, "TFDSEagerSource")
    with pytest.raises(DataraxError) as err:
        make(data_dir, split=split)
    assert str(err.value) == (
        f"{name}: split '{split}' of dataset 'datarax_tiny' holds no records; pick a "
        "split (or slice) that has some."
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_a_slice_past_the_split_end_is_named(data_dir, streaming):
    make, name = (stream, "TFDSStreamingSource") if streaming else (eager, "TFDSEagerSource")
    with pytest.raises(DataraxError) as err:
        make(data_dir, split="train[2:100000]")
    assert str(err.value).startswith(
        f"{name}: cannot slice split 'train[2:100000]' of dataset 'datarax_tiny': "
    )
    assert str(err.value).endswith(
        "TFDS slices must lie within the split: end the slice at its size or before (or use "
        "percent slices, e.g. 'train[:80%]')."
    )


def test_64bit_policy(data_dir):
    def wide(**kw):
        return TFDSEagerSource(TFDSEagerConfig(name="datarax_wide", data_dir=data_dir, **kw))

    small = wide(include_keys=("small",))
    assert small.element_spec()["small"] == jax.ShapeDtypeStruct((), np.int32)
    with pytest.raises(ConfigError) as err:
        wide(include_keys=("f64",))
    assert str(err.value) == (
        "TFDSEagerSource: field 'f64' is float64 but jax_enable_x64 is off, and datarax "
        "never narrows silently. Set cast_float64=True in the config to cast it to float32, "
        "enable x64 with jax.config.update('jax_enable_x64', True), or drop the field "
        "(exclude_keys)."
    )
    assert wide(include_keys=("f64",), cast_float64=True).element_spec()["f64"].dtype == np.float32
    with pytest.raises(RecordError) as err:
        wide(include_keys=("big",))
    index = err.value.index  # position of the record in the prepared split (TFDS's order)
    assert str(err.value) == (
        f"TFDSEagerSource: cannot read record {index} of split 'train' of dataset "
        "'datarax_wide': field 'big' is int64 and holds 1099511627776, outside "
        "the int32 range, so it cannot be cast to int32 without loss while jax_enable_x64 "
        "is off. Enable x64 with jax.config.update('jax_enable_x64', True), or drop the "
        "field (exclude_keys)."
    )
    data = tfds.data_source("datarax_wide", split="train", data_dir=data_dir, download=False)
    assert int(data[index]["big"]) == 2**40


def test_a_catalog_dataset_not_prepared_in_data_dir_says_not_prepared(tmp_path):
    # TFDS answers as for a TFRecord-only copy; there is no copy at all here
    with pytest.raises(DataraxError) as err:
        TFDSStreamingSource(TFDSStreamingConfig(name="datarax_tiny", data_dir=str(tmp_path), download=False))
    assert str(err.value) == (
        f"TFDSStreamingSource: dataset 'datarax_tiny' is not prepared in data_dir={str(tmp_path)!r}, "
        "and download=False reads only what is prepared. Point data_dir= at the folder holding "
        "it, or prepare it there (tfds.builder('datarax_tiny').download_and_prepare("
        "file_format='array_record'))."
    )


def test_a_dataset_not_prepared_in_the_default_data_dir_says_not_prepared(tmp_path,
                                                                          monkeypatch):
    # TFDS answers 'unknown split' (of none) when the default folder holds no copy
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "empty"))  # TFDS's default data_dir
    with pytest.raises(DataraxError) as err:
        TFDSStreamingSource(TFDSStreamingConfig(name="mnist", split="test", download=False))
    assert str(err.value) == (
        "TFDSStreamingSource: dataset 'mnist' is not prepared in the default data_dir, and "
        "download=False reads only what is prepared. Point data_dir= at the folder holding "
        "it, or prepare it there (tfds.builder('mnist').download_and_prepare("
        "file_format='array_record'))."
    )


def test_tfrecord_only_dataset(tfrecord_dir):
    with pytest.raises(DataraxError) as err:
        TFDSStreamingSource(TFDSStreamingConfig(name="datarax_tiny", data_dir=tfrecord_dir, download=False))
    assert str(err.value) == (
        "TFDSStreamingSource: dataset 'datarax_tiny' is prepared only as TFRecord, which has "
        "no random access. Either convert it to ArrayRecord, which datarax reads without "
        "TensorFlow (`tfds convert_format --dataset_dir=<data_dir>/datarax_tiny/<version> "
        "--out_file_format=array_record`), or prepare it afresh with "
        "tfds.builder('datarax_tiny').download_and_prepare(file_format='array_record'), or "
        "use TFDSEagerSource, which reads TFRecord through TensorFlow."
    )
    # TensorFlow is installed here, so the eager source reads TFRecord through it
    source = TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir=tfrecord_dir, exclude_keys=("text",)))
    assert sorted(values([source.get_batch_at(0, N)])) == list(range(N))


_NO_TF = textwrap.dedent(
    '''
    import importlib.abc, importlib.util, sys
    def _blocked(name):
        return name == "tensorflow" or name.startswith("tensorflow.")
    class _NoTF(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if _blocked(name):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: None if _blocked(name) else _find_spec(name, package)
    sys.meta_path.insert(0, _NoTF())
    '''
)


def _run_without_tensorflow(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _NO_TF + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300,
    )


def test_reading_needs_no_tensorflow(data_dir, tfrecord_dir):
    out = _run_without_tensorflow(
        f'''
        import sys
        from datarax.sources import TFDSStreamingSource, TFDSStreamingConfig, TFDSEagerSource, TFDSEagerConfig
        s = TFDSStreamingSource(TFDSStreamingConfig(name="datarax_tiny", data_dir={data_dir!r}, download=False))
        b = s.get_batch(4)
        e = TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir={data_dir!r}, download=False, exclude_keys=["text"]))
        print(len(b["text"]), len(e), "tensorflow" in sys.modules)
        try:
            TFDSEagerSource(TFDSEagerConfig(name="datarax_tiny", data_dir={tfrecord_dir!r}, download=False))
        except Exception as err:
            print(type(err).__name__, err)
        '''
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "4 20 False"
    assert lines[1] == (
        "DataraxError TFDSEagerSource: dataset 'datarax_tiny' is prepared only as TFRecord, "
        "which has no random access and needs TensorFlow to read, and TensorFlow is not "
        "installed. Either convert it to ArrayRecord, which datarax reads without TensorFlow "
        "(`tfds convert_format --dataset_dir=<data_dir>/datarax_tiny/<version> "
        "--out_file_format=array_record`), or prepare it afresh with "
        "tfds.builder('datarax_tiny').download_and_prepare(file_format='array_record'), or "
        "install TensorFlow (pip install tensorflow) so TFDSEagerSource can read TFRecord."
    )


def test_missing_extra_names_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(MissingExtraError) as err:
        TFDSEagerSource(TFDSEagerConfig(name="mnist"))
    assert str(err.value) == (
        "TFDSEagerSource needs the optional package 'tensorflow_datasets', which is not "
        'installed. Install it with: pip install "datarax[tfds]"'
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_image_features_without_pillow_or_opencv_name_the_tfds_extra(data_dir, streaming,
                                                                    monkeypatch):
    cls, config = ((TFDSStreamingSource, TFDSStreamingConfig) if streaming
                   else (TFDSEagerSource, TFDSEagerConfig))
    settings = dict(name="datarax_pictures", data_dir=data_dir, download=False)
    pictures = np.asarray(next(iter(Pipeline(source=cls(config(**settings)), stages=[],
                                             batch_size=3)))["picture"])
    assert sorted(pictures[:, 0, 0, 0].tolist()) == [0, 40, 80]  # decoded, as stored
    for package in ("PIL", "cv2"):  # neither installed: refused when opened, not per record
        monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(MissingExtraError) as err:
        cls(config(**settings))
    assert str(err.value) == (
        f"{cls.__name__} needs the optional package 'PIL' (imported by 'tensorflow_datasets'), "
        'which is not installed. Install it with: pip install "datarax[tfds]"'
    )


def test_config_validation():
    with pytest.raises(ConfigError, match="must name a TFDS dataset"):
        TFDSEagerConfig()
    with pytest.raises(ConfigError, match="num_threads must be >= 1"):
        TFDSStreamingConfig(name="mnist", num_threads=0)


# -------------------------------------------------------------------- factory
def test_from_tfds_chooses(data_dir):
    assert isinstance(from_tfds("datarax_tiny", "train", streaming=True, data_dir=data_dir), TFDSStreamingSource)
    forced = from_tfds("datarax_tiny", "train", streaming=False, data_dir=data_dir, exclude_keys=("text",))
    assert isinstance(forced, TFDSEagerSource)
    # automatic: a small split -> eager, text fields included (kept on the host)
    assert isinstance(from_tfds("datarax_tiny", "train", data_dir=data_dir), TFDSEagerSource)
    auto = from_tfds("datarax_tiny", "train", data_dir=data_dir, exclude_keys=("text",), rngs=nnx.Rngs(0))
    assert isinstance(auto, TFDSEagerSource)


def test_from_tfds_names_an_unknown_option():
    with pytest.raises(ConfigError) as err:  # was TypeError naming TFDSEagerConfig.__init__
        from_tfds("mnist", "train", chunk_size=4)
    assert str(err.value).startswith(
        "from_tfds got unknown option(s) ['chunk_size']; the config options are ['cast_float64', "
        "'data_dir', ")
