"""Exact resume for the file-backed sources: ArrayRecord, Hugging Face, TFDS.

Each runs through ``datarax.testing.check_resume_exact`` (JSON state, rebuilt from
scratch, interrupted mid-epoch, on the boundary and repeatedly). The defaults are a
few examples each; ``-m slow`` runs more.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datarax.pipeline import Pipeline
from datarax.testing import check_resume_exact, collect

from reliability_sources import stages

FEW = settings(max_examples=6, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MORE = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def points(data, num_records: int, batch_size: int, epochs: int) -> list[int]:
    bound = math.ceil(num_records / batch_size) * epochs
    return data.draw(st.lists(st.integers(0, bound), max_size=4), label="points")


# ------------------------------------------------------------------ ArrayRecord
@pytest.fixture(scope="module")
def ar_files(tmp_path_factory):
    pytest.importorskip("datarax.sources.array_record")
    from reliability_arrayrecord import write_files

    return write_files(tmp_path_factory.mktemp("ar"), 17, num_files=3)


def _ar_case(ar_files, data, settings_name: str) -> None:
    from reliability_arrayrecord import close_source, make_arrayrecord_pipeline

    bs = data.draw(st.integers(1, 5), label="batch_size")
    epochs = data.draw(st.integers(1, 2), label="epochs")
    kw = dict(
        shuffle=data.draw(st.booleans(), label="shuffle"),
        stochastic=data.draw(st.booleans(), label="stochastic"),
        drop_remainder=data.draw(st.booleans(), label="drop_remainder"),
        bad=frozenset(data.draw(st.sets(st.integers(0, 16), max_size=3), label="bad")),
    )
    count = data.draw(st.sampled_from([1, 1, 2]), label="shard_count")
    kw["shard_count"], kw["shard_index"] = count, data.draw(st.integers(0, count - 1))
    level = data.draw(st.sampled_from(["pipeline", "iterator"]), label="level")
    report = check_resume_exact(
        lambda: make_arrayrecord_pipeline(ar_files, bs, **kw),
        points(data, 17, bs, epochs), num_epochs=epochs, level=level, close=close_source,
    )
    assert report.max_state_bytes < 1024


@FEW
@given(data=st.data())
def test_arrayrecord_resumes_exactly(ar_files, data):
    _ar_case(ar_files, data, "few")


@pytest.mark.slow
@MORE
@given(data=st.data())
def test_arrayrecord_resumes_exactly_big(ar_files, data):
    _ar_case(ar_files, data, "more")


def test_arrayrecord_resume_skips_exactly_the_same_bad_records(ar_files):
    from reliability_arrayrecord import close_source, make_arrayrecord_pipeline

    bad = frozenset({0, 5, 6, 16})
    make = lambda: make_arrayrecord_pipeline(ar_files, 3, shuffle=True, bad=bad)  # noqa: E731
    report = check_resume_exact(make, [1, 2, 2, 4, 5, 9], num_epochs=2, close=close_source)
    assert report.num_records == (17 - len(bad)) * 2
    pipeline = make()
    ids = [int(i) for _, b in collect(pipeline, 1) for i in b["id"]]
    assert sorted(ids) == sorted(set(range(17)) - bad)
    reports = pipeline.source.skipped_records()
    assert sorted(r.index for r in reports) == sorted(bad)
    for r in reports:  # file, index in that file and cause are reported
        assert r.epoch == 0 and r.path.endswith(".array_record")
        assert f"record {r.index} is corrupt" in r.cause
    # The pass ended: its state is the start of epoch 1, with no skips yet (a state
    # inside an epoch carries its skips, so a resume counts them once: check_resume_exact).
    state = pipeline.get_state()
    assert (state["epoch"], state["source"]["skipped"]) == (1, 0)
    close_source(pipeline)


# ---------------------------------------------------------------- Hugging Face
@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    from hf_files import write_hub_split

    datasets.disable_progress_bars()
    n = 23
    return write_hub_split(tmp_path_factory.mktemp("hf"), {
        "idx": np.arange(n, dtype=np.int32),
        "x": np.arange(n, dtype=np.float32) * 0.5,
        "sentence": [f"sentence {i}" for i in range(n)],
    }, rows_per_file=12)


def _hf_pipeline(folder: str, streaming: bool, bs: int, shuffle: bool, stochastic: bool,
                 drop: bool, shard: tuple[int, int] = (0, 1)) -> Pipeline:
    from datarax.sources import HFEagerConfig, HFEagerSource, HFStreamingConfig, HFStreamingSource

    if streaming:
        source = HFStreamingSource(HFStreamingConfig(name=folder, split="train", shuffle=shuffle,
                                                     seed=3, chunk_size=4, shuffle_buffer_size=5))
        ops = stages(stochastic)[1:]  # text fields: stages run per record on the host
    else:
        source = HFEagerSource(HFEagerConfig(name=folder, split="train", shuffle=shuffle, seed=3,
                                             exclude_keys=("sentence",)))
        ops = stages(stochastic)
    return Pipeline(source=source, stages=ops, batch_size=bs, rngs=nnx.Rngs(0),
                    drop_remainder=drop, shard_index=shard[0], shard_count=shard[1])


@FEW
@given(streaming=st.booleans(), bs=st.integers(2, 6), shuffle=st.booleans(),
       stochastic=st.booleans(), drop=st.booleans(), epochs=st.integers(1, 2), data=st.data())
def test_hf_eager_and_streaming_resume_exactly(hf_folder, hf_offline, streaming, bs, shuffle,
                                               stochastic, drop, epochs, data):
    count = data.draw(st.sampled_from([1, 1, 2]), label="shard_count")
    shard = (data.draw(st.integers(0, count - 1), label="shard_index"), count)
    report = check_resume_exact(
        lambda: _hf_pipeline(hf_folder, streaming, bs, shuffle, stochastic, drop, shard),
        points(data, 23, bs, epochs), num_epochs=epochs,
        level=data.draw(st.sampled_from(["pipeline", "iterator"])),
    )
    if count == 1:
        assert report.num_records == (23 - (23 % bs if drop else 0)) * epochs


def test_hf_streaming_text_survives_resume(hf_folder, hf_offline):
    make = lambda: _hf_pipeline(hf_folder, True, 4, True, True, False)  # noqa: E731
    report = check_resume_exact(make, [1, 3, 3, 6, 8], num_epochs=2)
    assert report.num_records == 46
    batch = collect(make(), 1)[0][1]
    assert isinstance(batch["sentence"], list) and batch["sentence"][0].startswith("sentence ")


# ------------------------------------------------------------------------ TFDS
@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """rel_tiny: 19 train records: image (3,) uint8, label."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from tfds_datasets import prepare

    return prepare(tmp_path_factory.mktemp("tfds"), "RelTiny", {
        "image": tfds.features.Tensor(shape=(3,), dtype=np.uint8),
        "label": tfds.features.Tensor(shape=(), dtype=np.int32),
    }, {"train": {i: {"image": np.full(3, i, np.uint8), "label": np.int32(i)} for i in range(19)}})


def _tfds_pipeline(data_dir: str, streaming: bool, bs: int, shuffle: bool, stochastic: bool,
                   drop: bool, shard: tuple[int, int] = (0, 1)) -> Pipeline:
    from datarax.sources import (TFDSEagerConfig, TFDSEagerSource, TFDSStreamingConfig,
                                 TFDSStreamingSource)

    if streaming:
        source = TFDSStreamingSource(TFDSStreamingConfig(
            name="rel_tiny", data_dir=data_dir, shuffle=shuffle, seed=5, num_threads=2))
    else:
        source = TFDSEagerSource(TFDSEagerConfig(name="rel_tiny", data_dir=data_dir,
                                                 shuffle=shuffle, seed=5))
    return Pipeline(source=source, stages=stages(stochastic), batch_size=bs, rngs=nnx.Rngs(0),
                    drop_remainder=drop, shard_index=shard[0], shard_count=shard[1])


def _close(pipeline: Pipeline) -> None:
    close = getattr(pipeline.source, "close", None)
    if close is not None:
        close()


@FEW
@given(streaming=st.booleans(), bs=st.integers(2, 6), shuffle=st.booleans(),
       stochastic=st.booleans(), drop=st.booleans(), epochs=st.integers(1, 2), data=st.data())
@pytest.mark.slow
def test_tfds_eager_and_streaming_resume_exactly(tfds_dir, streaming, bs, shuffle, stochastic,
                                                 drop, epochs, data):
    count = data.draw(st.sampled_from([1, 1, 2]), label="shard_count")
    shard = (data.draw(st.integers(0, count - 1), label="shard_index"), count)
    report = check_resume_exact(
        lambda: _tfds_pipeline(tfds_dir, streaming, bs, shuffle, stochastic, drop, shard),
        points(data, 19, bs, epochs), num_epochs=epochs, close=_close,
        level=data.draw(st.sampled_from(["pipeline", "iterator"])),
    )
    share = 19 // count
    assert report.num_records == (share - (share % bs if drop else 0)) * epochs


@pytest.mark.slow  # heavy; the default run covers this path in lighter tests
def test_tfds_eager_and_streaming_agree_after_resume(tfds_dir):
    """Both TFDS modes serve the same shuffled order; a resumed stream still agrees."""
    eager = collect(_tfds_pipeline(tfds_dir, False, 4, True, True, False), 2)
    stream = collect(_tfds_pipeline(tfds_dir, True, 4, True, True, False), 2)
    for (e1, b1), (e2, b2) in zip(eager, stream):
        assert e1 == e2
        np.testing.assert_array_equal(b1["label"], b2["label"])
        np.testing.assert_array_equal(b1["noise"], b2["noise"])
    check_resume_exact(lambda: _tfds_pipeline(tfds_dir, True, 4, True, True, False),
                       [2, 5, 5], num_epochs=2, close=_close)


os.environ.setdefault("JAX_PLATFORMS", "cpu")


def test_arrayrecord_direct_iteration_resumes_exactly(ar_files):
    """The seed page's checkpointing: source.get_state() / set_state() while iterating it."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.testing import check_source_resume_exact
    from reliability_arrayrecord import Decode

    def make():
        return ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=4, num_epochs=2, shuffle_files=True, on_error="skip"),
            ar_files, decode=Decode(frozenset({3})), num_threads=2,
        )

    assert check_source_resume_exact(make, [1, 5, 5, 16, 17, 30], close=lambda s: s.close()) == 32
