"""Sources take their settings as keywords or as the config object, as operators do: one
mechanism (``DataraxModule.build_config``) for every source that has a config."""

import inspect

import numpy as np
import pytest
from int_record_files import int_decode, write_int_parts

import datarax.sources as sources_package
from datarax.core.errors import ConfigError
from datarax.sources import (
    ArrayRecordSourceConfig,
    ArrayRecordSourceModule,
    MemorySource,
    MemorySourceConfig,
    NpySource,
    NpySourceConfig,
)
from datarax.sources.hf import HFEagerConfig, HFEagerSource, HFStreamingConfig, HFStreamingSource
from datarax.sources.tfds import (
    TFDSEagerConfig,
    TFDSEagerSource,
    TFDSStreamingConfig,
    TFDSStreamingSource,
)
from datarax.text import PackedTextConfig, PackedTextSource

DATA = {"x": np.arange(12, dtype=np.int32)}


def docs(epoch):
    return ["a b c", "d e", "f g h i j k"]


def tok(text):
    return [ord(w) - 96 for w in text.split()]


@pytest.fixture
def files(tmp_path):
    npy = str(tmp_path / "x.npy")
    np.save(npy, np.arange(12, dtype=np.int32))
    return {"npy": npy, "ar": write_int_parts(tmp_path, [5, 12])}


# (config-object form, keyword form): each pair must build equal configs and serve the
# same records in the same order.
BOTH_WAYS = {
    "MemorySource": (
        lambda f: MemorySource(MemorySourceConfig(shuffle=True, seed=3, num_epochs=2), DATA),
        lambda f: MemorySource(data=DATA, shuffle=True, seed=3, num_epochs=2),
    ),
    "ArrayRecordSourceModule": (
        lambda f: ArrayRecordSourceModule(
            ArrayRecordSourceConfig(shuffle_files=True, seed=5, num_epochs=1), f["ar"],
            decode=int_decode("i")),
        lambda f: ArrayRecordSourceModule(paths=f["ar"], decode=int_decode("i"), shuffle_files=True,
                                          seed=5, num_epochs=1),
    ),
    "NpySource": (
        lambda f: NpySource(NpySourceConfig(paths=f["npy"], field="i", shuffle=True, seed=9)),
        lambda f: NpySource(paths=f["npy"], field="i", shuffle=True, seed=9),
    ),
    "PackedTextSource": (
        lambda f: PackedTextSource(PackedTextConfig(seq_len=4, open_rows=2), docs, tok),
        lambda f: PackedTextSource(documents=docs, tokenizer=tok, seq_len=4, open_rows=2),
    ),
}
# Covered by the test files that can build them: tests/sources/test_dataset_config.py (HF),
# tests/sources/test_tfds.py (TFDS).
ELSEWHERE = {"HFEagerSource", "HFStreamingSource", "TFDSEagerSource", "TFDSStreamingSource"}


def test_every_source_with_a_config_class_is_covered():
    classes = {
        name for name in sources_package.__all__
        if inspect.isclass(cls := getattr(sources_package, name))
        and getattr(cls, "config_class", None) is not None
    } | {"PackedTextSource"}
    assert classes == set(BOTH_WAYS) | ELSEWHERE
    assert PackedTextSource.config_class is PackedTextConfig


def records(source):
    first = next(iter(source.element_spec()))
    return [np.asarray(record[first]).tolist() for record in source]


@pytest.mark.parametrize("name", sorted(BOTH_WAYS))
def test_config_object_and_keywords_build_equal_sources(name, files):
    with_config, with_keywords = BOTH_WAYS[name]
    a, b = with_config(files), with_keywords(files)
    try:
        assert type(a).__name__ == type(b).__name__ == name
        assert a.config == b.config
        assert a.name == b.name == name
        assert records(a) == records(b) and records(a)
    finally:
        a.close()
        b.close()


def test_a_source_given_only_its_data_takes_its_default_settings():
    assert MemorySource(data=DATA).config == MemorySourceConfig()
    assert records(MemorySource(data=DATA)) == records(MemorySource(MemorySourceConfig(), DATA))
    assert PackedTextSource(documents=docs, tokenizer=tok).config == PackedTextConfig()


def test_memory_source_takes_its_config_as_a_keyword_too():
    source = MemorySource(data=DATA, config=MemorySourceConfig(shuffle=True, seed=3))
    assert source.config == MemorySourceConfig(shuffle=True, seed=3)
    assert sorted(source.get_batch_at(0, len(source))["x"].tolist()) == DATA["x"].tolist()


def test_keywords_that_agree_with_the_config_beside_them_are_accepted():
    source = MemorySource(MemorySourceConfig(shuffle=True), DATA, shuffle=True)
    assert source.config == MemorySourceConfig(shuffle=True)


@pytest.mark.parametrize("build, message", [
    (lambda: MemorySource(data=DATA, shufle=True),
     "MemorySource got unknown setting(s) ['shufle']; its settings are ['shuffle', 'seed', "
     "'track_metadata', 'num_epochs', 'cast_float64']."),
    (lambda: MemorySource(MemorySourceConfig(seed=1), DATA, seed=2),
     "MemorySource got keyword settings that disagree with its MemorySourceConfig: seed=2 "
     "(config: 1). Give each setting once, in the config or as a keyword."),
    (lambda: MemorySource(DATA, shuffle=True),
     "where its MemorySourceConfig goes, and no data: the config comes first, the data "
     "second."),
    (lambda: MemorySource(shuffle=True),
     "MemorySource needs its data after the config. Call MemorySource(MemorySourceConfig(), "
     "data=...)."),
    (lambda: ArrayRecordSourceModule(paths="x.array_record", shuffle=True),
     "ArrayRecordSourceModule got unknown setting(s) ['shuffle']; its settings are ['seed', "
     "'num_epochs', 'shuffle_files', 'shuffle_window', 'shuffle_block', 'on_error', 'max_skipped', "
     "'max_skipped_fraction', 'cast_float64']."),
    (lambda: ArrayRecordSourceModule(ArrayRecordSourceConfig(), path="x.array_record"),
     "ArrayRecordSourceModule got unknown setting(s) ['path']; its settings are ['seed', "
     "'num_epochs', 'shuffle_files', 'shuffle_window', 'shuffle_block', 'on_error', 'max_skipped', "
     "'max_skipped_fraction', 'cast_float64']. Did you mean paths=, a keyword argument of "
     "ArrayRecordSourceModule (not a setting of its config)?"),
    (lambda: ArrayRecordSourceModule(ArrayRecordSourceConfig(), "x.array_record", num_thread=2),
     "Did you mean num_threads=, a keyword argument of ArrayRecordSourceModule"),
    (lambda: NpySource(),
     "NpySource needs its settings: NpySourceConfig(...) first, or the settings as keywords "
     "(paths, field, shuffle, seed, num_epochs, cast_float64, on_error, max_skipped, "
     "max_skipped_fraction). Call NpySource(NpySourceConfig(paths='x.npy')) or "
     "NpySource(paths='x.npy')."),
    (lambda: PackedTextSource(seq_len=4),
     "PackedTextSource needs its documents and tokenizer after the settings. Call "
     "PackedTextSource(PackedTextConfig(seq_len=512), documents, tokenizer) or "
     "PackedTextSource(documents=..., tokenizer=..., seq_len=512)."),
    (lambda: MemorySource(data=DATA, seed=-1), "MemorySourceConfig.seed must be >= 0, got -1."),
    (lambda: MemorySource(DATA, config=MemorySourceConfig()),
     "first and config= as a keyword: the config comes first, the data second. Call MemorySource(MemorySourceConfig(), "
     "data), MemorySource(config=MemorySourceConfig(), data=data) or MemorySource(data=data, "
     "shuffle=...) (settings as keywords)."),
    (lambda: MemorySource(MemorySourceConfig(), data=DATA, config=MemorySourceConfig()),
     "MemorySource got its config twice: MemorySourceConfig first and config= as a keyword."),
    (lambda: MemorySource(MemorySourceConfig(), DATA, MemorySourceConfig()),
     "MemorySource takes at most two positional arguments, the config and then the data; got 3"),
    (lambda: ArrayRecordSourceModule(["a.array_record"], config=ArrayRecordSourceConfig()),
     "ArrayRecordSourceModule got list ['a.array_record'] first and config= as a keyword: the "
     "config comes first, the paths second. Call ArrayRecordSourceModule(ArrayRecordSourceConfig(), "
     "paths), ArrayRecordSourceModule(config=ArrayRecordSourceConfig(), paths=paths) or "
     "ArrayRecordSourceModule(paths=paths, shuffle_files=...) (settings as keywords)."),
    (lambda: ArrayRecordSourceModule(ArrayRecordSourceConfig(), "a.array_record", None),
     "ArrayRecordSourceModule takes at most two positional arguments, the config and then the "
     "paths; got 3"),
    # every source taking a config: the same refusals, not Python's TypeError
    (lambda: NpySource(NpySourceConfig(paths="x.npy"), "y.npy"),
     "NpySource takes one positional argument, the config; got 2: NpySourceConfig "),
    (lambda: NpySource("x.npy", config=NpySourceConfig(paths="x.npy")),
     "NpySource got str 'x.npy' first and config= as a keyword: the config is its only "
     "positional argument. Call NpySource(NpySourceConfig(paths='x.npy')), "
     "NpySource(config=NpySourceConfig(paths='x.npy')) or NpySource(paths='x.npy') (settings "
     "as keywords)."),
    (lambda: NpySource(NpySourceConfig(paths="x.npy"), config=NpySourceConfig(paths="x.npy")),
     "NpySource got its config twice: NpySourceConfig first and config= as a keyword."),
    (lambda: HFEagerSource(HFEagerConfig(name="imdb"), "train"),
     "HFEagerSource takes one positional argument, the config; got 2"),
    (lambda: HFStreamingSource("imdb", config=HFStreamingConfig(name="imdb")),
     "HFStreamingSource got str 'imdb' first and config= as a keyword: the config is its only "
     "positional argument. Call HFStreamingSource(HFStreamingConfig(name='imdb')), "
     "HFStreamingSource(config=HFStreamingConfig(name='imdb')) or "
     "HFStreamingSource(name='imdb', split=...) (settings as keywords)."),
    (lambda: TFDSEagerSource(TFDSEagerConfig(name="mnist"), config=TFDSEagerConfig(name="mnist")),
     "TFDSEagerSource got its config twice: TFDSEagerConfig first and config= as a keyword."),
    (lambda: TFDSStreamingSource(TFDSStreamingConfig(name="mnist"), "test"),
     "TFDSStreamingSource takes one positional argument, the config; got 2"),
    (lambda: PackedTextSource(PackedTextConfig(seq_len=4), docs, str.split, 0),
     "PackedTextSource takes at most three positional arguments, the config and then the "
     "documents and the tokenizer; got 4"),
    (lambda: PackedTextSource(["a b"], str.split, config=PackedTextConfig(seq_len=4)),
     "PackedTextSource got list ['a b'] first and config= as a keyword: the config comes "
     "first, then the documents and the tokenizer."),
])
def test_bad_missing_or_conflicting_settings_are_refused_naming_them(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert message in str(err.value)
