"""DatasetConfig: the fields HF and TFDS configs share, checked once with one wording;
the config type checked once; include/exclude keys as any iterable of names; from_hf
deciding eager vs streaming before building a source."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError
from datarax.sources import (
    HFEagerConfig,
    HFEagerSource,
    HFStreamingConfig,
    HFStreamingSource,
    TFDSEagerConfig,
    TFDSEagerSource,
    TFDSStreamingConfig,
    TFDSStreamingSource,
)
from datarax.sources._dataset_config import DatasetConfig

CONFIGS = {
    HFEagerConfig: {"name": "x"},
    HFStreamingConfig: {"name": "x"},
    TFDSEagerConfig: {"name": "mnist"},
    TFDSStreamingConfig: {"name": "mnist"},
}
SHARED_DEFAULTS = {
    "split": "train",
    "data_dir": None,
    "include_keys": None,
    "exclude_keys": None,
    "shuffle": False,
    "seed": 42,
    "cast_float64": False,
    "track_metadata": False,
    "num_epochs": 1,
}


def test_every_dataset_config_keeps_its_keywords_and_defaults():
    own = {
        HFEagerConfig: {"name": "x", "data_files": None, "streaming": False},
        HFStreamingConfig: {
            "name": "x", "data_files": None, "streaming": True, "chunk_size": 1024,
            "shuffle_buffer_size": 1000, "on_error": "raise", "max_skipped": None,
            "max_skipped_fraction": None,
        },
        TFDSEagerConfig: {"name": "mnist", "download": True},
        TFDSStreamingConfig: {
            "name": "mnist", "download": True, "num_threads": 4, "read_ahead": None,
            "on_error": "raise", "max_skipped": None, "max_skipped_fraction": None,
        },
    }
    for cls, kwargs in CONFIGS.items():
        config = cls(**kwargs)
        assert isinstance(config, DatasetConfig)
        assert config.to_dict() == {**SHARED_DEFAULTS, **own[cls]}


@pytest.mark.parametrize("cls", list(CONFIGS), ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("split", "", "{cls}.split must be a non-empty str such as 'train', got ''."),
        ("data_dir", 3, "{cls}.data_dir must be a str, a pathlib.Path or None, got 3."),
        ("seed", -1, "{cls}.seed must be >= 0, got -1."),
        ("shuffle", 1, "{cls}.shuffle must be a bool (True/False), got int 1."),
        ("cast_float64", "yes", "{cls}.cast_float64 must be a bool (True/False), got str 'yes'."),
        ("num_epochs", 0, "{cls}.num_epochs must be >= 1 (or -1 for passes without end), got 0."),
        (
            "include_keys",
            "label",
            "{cls}.include_keys must be None or an iterable of field names (a list, tuple "
            "or set), got the single string 'label'; wrap it: include_keys=('label',).",
        ),
        (
            "exclude_keys",
            5,
            "{cls}.exclude_keys must be None or an iterable of field names (a list, tuple "
            "or set), got int 5.",
        ),
        (
            "include_keys",
            {"label", 3},
            "{cls}.include_keys must hold field names (str), but holds 3 (int).",
        ),
    ],
)
def test_shared_fields_are_checked_once_with_one_wording(cls, field, value, message):
    with pytest.raises(ConfigError) as err:
        cls(**CONFIGS[cls], **{field: value})
    assert str(err.value) == message.format(cls=cls.__name__)


@pytest.mark.parametrize("cls", list(CONFIGS), ids=lambda c: c.__name__)
def test_keys_accept_any_iterable_of_names(cls):
    kwargs = CONFIGS[cls]
    assert cls(**kwargs, include_keys={"label", "image"}).include_keys == ("image", "label")
    assert cls(**kwargs, exclude_keys=frozenset({"b", "a"})).exclude_keys == ("a", "b")
    assert cls(**kwargs, include_keys=["label", "image"]).include_keys == ("label", "image")
    assert cls(**kwargs, include_keys=(k for k in ("x", "y"))).include_keys == ("x", "y")
    assert cls(**kwargs, include_keys={"label": 0, "id": 1}.keys()).include_keys == ("id", "label")
    # equal sets give equal (and equally hashed) configs
    a = cls(**kwargs, include_keys={"c", "a", "b"})
    b = cls(**kwargs, include_keys={"b", "c", "a"})
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize(
    "source, config, message",
    [
        (HFEagerSource, HFStreamingConfig(name="x"),
         "HFEagerSource needs an HFEagerConfig, got HFStreamingConfig."),
        (HFStreamingSource, HFEagerConfig(name="x"),
         "HFStreamingSource needs an HFStreamingConfig, got HFEagerConfig."),
        (TFDSEagerSource, TFDSStreamingConfig(name="mnist"),
         "TFDSEagerSource needs a TFDSEagerConfig, got TFDSStreamingConfig."),
        (TFDSStreamingSource, TFDSEagerConfig(name="mnist"),
         "TFDSStreamingSource needs a TFDSStreamingConfig, got TFDSEagerConfig."),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_source_refuses_another_sources_config(source, config, message):
    with pytest.raises(ConfigError) as err:
        source(config)
    assert str(err.value) == message


# ---------------------------------------------------------- on real HF sources
datasets = pytest.importorskip("datasets")


@pytest.fixture
def saved(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    datasets.disable_progress_bars()
    rows = {
        "a": np.arange(6, dtype=np.int32),
        "b": np.arange(6, dtype=np.float32) * 2,
        "c": np.arange(6, dtype=np.int32) * 3,
    }
    path = str(tmp_path / "saved")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(path)
    return path


def test_sets_select_fields_on_eager_and_streaming_sources(saved):
    eager = HFEagerSource(HFEagerConfig(name=saved, include_keys={"c", "a"}))
    assert list(eager.element_spec()) == ["a", "c"]  # dataset order, not the set's
    assert np.asarray(eager.get_batch_at(0, 6)["c"]).tolist() == [0, 3, 6, 9, 12, 15]
    stream = HFStreamingSource(HFStreamingConfig(name=saved, exclude_keys={"a", "c"}))
    assert list(stream.element_spec()) == ["b"]
    assert np.asarray(stream.get_batch(6)["b"]).tolist() == [0, 2, 4, 6, 8, 10]


def test_unknown_names_in_a_set_are_refused(saved):
    with pytest.raises(ConfigError) as err:
        HFEagerSource(HFEagerConfig(name=saved, include_keys={"a", "nope"}))
    assert str(err.value) == (
        "HFEagerSource: include_keys names field(s) ['nope'] that the dataset does not "
        "have; its fields are ['a', 'b', 'c']."
    )


def test_from_hf_builds_only_the_source_it_returns(saved, monkeypatch):
    from datarax.sources import from_hf
    from datarax.sources.hf import factory

    built: list[str] = []
    for cls in (HFEagerSource, HFStreamingSource):
        def counting(self, *args, _init=cls.__init__, _name=cls.__name__, **kwargs):
            built.append(_name)
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    assert isinstance(from_hf(saved, "train"), HFEagerSource)
    assert built == ["HFEagerSource"]
    built.clear()
    monkeypatch.setattr(factory, "EAGER_MAX_BYTES", 1)  # too big for eager now
    assert isinstance(from_hf(saved, "train"), HFStreamingSource)
    assert built == ["HFStreamingSource"]


def test_from_hf_refuses_streaming_options_when_told_eager(saved):
    from datarax.sources import from_hf

    with pytest.raises(ConfigError) as err:
        from_hf(saved, "train", streaming=False, chunk_size=8)
    assert str(err.value) == (
        "from_hf: ['chunk_size'] apply only to streaming (HFStreamingSource); drop them or "
        "pass streaming=True."
    )


def test_hf_sources_take_their_settings_as_keywords_name_being_the_datasets(saved):
    eager = HFEagerSource(name=saved, include_keys={"c", "a"}, shuffle=True, seed=4)
    same = HFEagerSource(HFEagerConfig(name=saved, include_keys={"c", "a"}, shuffle=True, seed=4))
    assert eager.config == same.config and eager.name == "HFEagerSource"
    assert (np.asarray(eager.get_batch_at(0, 6)["c"]).tolist()
            == np.asarray(same.get_batch_at(0, 6)["c"]).tolist())
    stream = HFStreamingSource(name=saved, exclude_keys={"a", "c"}, chunk_size=2)
    assert stream.config == HFStreamingConfig(name=saved, exclude_keys={"a", "c"}, chunk_size=2)
    assert np.asarray(stream.get_batch(6)["b"]).tolist() == [0, 2, 4, 6, 8, 10]
    named = HFEagerSource(HFEagerConfig(name=saved), name="train_split")  # beside a config:
    assert named.name == "train_split" and named.config.name == saved  # the module's name


def test_hf_and_tfds_sources_refuse_neither_a_config_nor_a_keyword():
    with pytest.raises(ConfigError) as err:
        HFStreamingSource()
    assert str(err.value).startswith(
        "HFStreamingSource needs its settings: HFStreamingConfig(...) first, or the settings "
        "as keywords (name, split, data_dir, ")
    with pytest.raises(ConfigError) as err:
        TFDSEagerSource(nam="mnist")
    assert str(err.value).startswith("TFDSEagerSource got unknown setting(s) ['nam']; its "
                                     "settings are ['name', 'split', ")
