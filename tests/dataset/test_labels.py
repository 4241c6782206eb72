"""LabelEncoder: string labels to int32 ids, stable sorted vocabulary, saved and loaded."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from datarax.core.errors import ConfigError, DataraxError
from datarax.pipeline import Pipeline
from datarax.sources import LabelEncoder, MemorySource, MemorySourceConfig

LABELS = ["dog", "cat", "dog", "bird", "cat", "ant"]


def test_fit_sorts_the_distinct_labels_whatever_their_order():
    encoder = LabelEncoder.fit(LABELS)
    assert encoder.vocabulary == ("ant", "bird", "cat", "dog") and len(encoder) == 4
    for shuffled in (LABELS[::-1], np.array(LABELS), set(LABELS), np.array(LABELS, object)):
        assert LabelEncoder.fit(shuffled) == encoder
    assert LabelEncoder.fit(np.array([b"b", b"a"])).vocabulary == ("a", "b")


def test_encode_and_decode_keep_shape_and_values():
    encoder = LabelEncoder.fit(LABELS)
    ids = encoder.encode(LABELS)
    assert ids.dtype == np.int32 and ids.tolist() == [3, 2, 3, 1, 2, 0]
    grid = encoder.encode(np.array([["ant", "dog"], ["cat", "cat"]]))
    assert grid.shape == (2, 2) and grid.tolist() == [[0, 3], [2, 2]]
    assert encoder.decode(ids).tolist() == LABELS
    assert encoder.decode(grid).tolist() == [["ant", "dog"], ["cat", "cat"]]
    explicit = LabelEncoder(["neg", "pos"])  # an explicit vocabulary keeps its order
    assert explicit.encode(["pos", "neg"]).tolist() == [1, 0]


def test_an_unknown_label_is_refused_naming_it():
    encoder = LabelEncoder.fit(LABELS)
    with pytest.raises(DataraxError) as err:
        encoder.encode(["cat", "emu"], field="label")
    assert str(err.value) == (
        "LabelEncoder: label 'emu' in field 'label' (value 1) is not in the vocabulary of 4 "
        "labels ['ant', 'bird', 'cat', 'dog']. Fit the encoder on data holding every label "
        "(LabelEncoder.fit over all splits), or drop such records first."
    )
    with pytest.raises(DataraxError) as err:
        encoder.decode(np.array([1, 4]))
    assert str(err.value) == "LabelEncoder.decode: id 4 is outside the vocabulary (0..3)."


def test_bad_vocabularies_are_refused():
    with pytest.raises(ConfigError) as err:
        LabelEncoder(["a", "b", "a"])
    assert str(err.value) == (
        "LabelEncoder vocabulary lists 'a' twice (ids 0 and 2); each label must appear once."
    )
    with pytest.raises(ConfigError, match="needs at least one label"):
        LabelEncoder([])
    with pytest.raises(ConfigError, match="needs a sequence of labels"):
        LabelEncoder("ab")
    with pytest.raises(DataraxError) as err:
        LabelEncoder.fit([1, 2])
    assert str(err.value) == (
        "LabelEncoder.fit: labels must be str (or bytes), got int 1. Numeric labels need no "
        "encoding."
    )


def test_save_and_load_round_trip(tmp_path):
    encoder = LabelEncoder.fit(["ß", "a", "z"])
    path = tmp_path / "labels.json"
    encoder.save(path)
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "format": "datarax.LabelEncoder", "version": 1, "vocabulary": ["a", "z", "ß"]
    }
    assert LabelEncoder.load(path) == encoder
    assert LabelEncoder.from_dict(encoder.to_dict()).encode(["ß"]).tolist() == [2]
    path.write_text('{"format": "datarax.LabelEncoder", "version": 9, "vocabulary": ["a"]}')
    with pytest.raises(DataraxError, match="version 9 is not 1"):
        LabelEncoder.load(path)
    path.write_text("not json")
    with pytest.raises(DataraxError, match="is not JSON"):
        LabelEncoder.load(path)


def test_an_encoded_label_rides_the_compiled_path():
    data = {"x": np.arange(6, dtype=np.float32), "label": np.array(LABELS)}
    encoder = LabelEncoder.fit(data["label"])
    source = MemorySource(
        MemorySourceConfig(shuffle=True, seed=5), encoder.encode_field(data, "label")
    )
    assert source.element_spec()["label"] == jax.ShapeDtypeStruct((), np.int32)
    batches = list(Pipeline(source=source, stages=[], batch_size=4))
    rows = [int(v) for b in batches for v in np.asarray(b["x"])]
    labels = [int(v) for b in batches for v in np.asarray(b["label"])]
    assert sorted(rows) == list(range(6))
    assert encoder.decode(np.array(labels)).tolist() == [LABELS[r] for r in rows]
    with pytest.raises(DataraxError, match="no field 'y' in the data"):
        encoder.encode_field(data, "y")


def test_the_encoder_is_one_class_under_both_public_paths():
    import datarax.dataset
    import datarax.sources

    assert datarax.dataset.LabelEncoder is datarax.sources.LabelEncoder is LabelEncoder
    assert LabelEncoder.__module__ == "datarax.dataset.labels"
