"""HFStreamingSource's bad-record policy (on_error / max_skipped / max_skipped_fraction),
offline on local parquet files."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from flax import nnx

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyarrow.parquet")

from datarax.core.errors import ConfigError, DataraxError, RecordError, StateError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import HFStreamingConfig, HFStreamingSource  # noqa: E402
from datarax.testing import json_round_trip  # noqa: E402
from hf_files import int32_lists, position_of, write_parquet  # noqa: E402

N = 40
BAD = (5, 21)  # record 5: a list of another length; record 21: an int64 past int32
GOOD = [i for i in range(N) if i not in BAD]
VEC_CAUSE = "field 'vec' is int32 of shape (3,), but the first record's is int32 of shape (2,)."
LABEL_CAUSE = (
    "field 'label' is int64 and record 21 holds 1099511627776, outside the int32 range, "
    "so it cannot be cast to int32 without loss while "
    "jax_enable_x64 is off. Enable x64 with jax.config.update('jax_enable_x64', True), "
    "or drop the field (exclude_keys)."
)


pytestmark = pytest.mark.usefixtures("hf_offline")


@pytest.fixture
def bad_parquet(tmp_path) -> str:
    vec = [[i, i] for i in range(N)]
    vec[BAD[0]] = [5, 5, 5]
    label = [i % 3 for i in range(N)]
    label[BAD[1]] = 2**40
    return write_parquet(tmp_path / "train.parquet", {
        "idx": np.arange(N, dtype=np.int32),
        "vec": int32_lists(vec),
        "label": pa.array(label, pa.int64()),
    })


def source(path: str, **kw) -> HFStreamingSource:
    kw = {"chunk_size": 8, **kw}
    return HFStreamingSource(HFStreamingConfig(name="parquet", data_files=path, **kw))


def pipeline(path: str, **kw) -> Pipeline:
    return Pipeline(source=source(path, **kw), stages=[], batch_size=4, rngs=nnx.Rngs(0))


def ids(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b["idx"])]


def test_raise_is_the_default_and_keeps_its_message(bad_parquet):
    with pytest.raises(DataraxError) as info:
        list(pipeline(bad_parquet))
    assert str(info.value) == (
        "HFStreamingSource: field 'vec' holds lists of different lengths (record 0 has 2, "
        "record 5 has 3); batches need one shape per field. Pad or truncate it first, or "
        "drop it (exclude_keys)."
    )
    assert "skipped" not in source(bad_parquet, exclude_keys=("vec",)).get_state()


@pytest.mark.parametrize("chunk_size", [4, 8])
def test_errors_name_the_record_by_its_position_in_the_stream(bad_parquet, chunk_size):
    # record 5 is in the second chunk of 4: named 5, not by its row in the chunk
    with pytest.raises(DataraxError, match=r"lengths \(record 4 has 2, record 5 has 3\)"
                       if chunk_size == 4 else r"lengths \(record 0 has 2, record 5 has 3\)"):
        list(pipeline(bad_parquet, chunk_size=chunk_size))


@pytest.mark.parametrize("chunk_size", [4, 8])
def test_errors_of_a_shard_name_the_record_by_its_position_in_the_stream(bad_parquet, chunk_size):
    # shard 1 of 2 keeps the odd records: its rows of a chunk are 2 positions apart
    def shard(**kw):
        src = source(bad_parquet, chunk_size=chunk_size, **kw)
        return Pipeline(source=src, stages=[], batch_size=4, shard_index=1, shard_count=2,
                        rngs=nnx.Rngs(0))

    # (with chunks of 8 the source's first chunk, read unsharded for the spec, holds it)
    named = {4: r"\(record 5 has 3, record 7 has 2\)", 8: r"\(record 0 has 2, record 5 has 3\)"}
    with pytest.raises(DataraxError, match=named[chunk_size]):
        list(shard())
    with pytest.raises(RecordError, match=r"field 'label' is int64 and record 21 holds"):
        list(shard(exclude_keys=("vec",)))


def test_skip_drops_counts_and_reports(bad_parquet):
    p = pipeline(bad_parquet, on_error="skip")
    it = iter(p)
    batches = [next(it) for _ in range(len(GOOD) // 4 + 1)]  # every good record
    assert ids(batches) == GOOD
    src = p.source
    assert position_of(src.get_state()) == {"current_index": N, "current_epoch": 0, "skipped": 2}
    with pytest.raises(StopIteration):
        next(it)
    # the pass is over: the state is the start of epoch 1 (none skipped there yet)
    assert position_of(src.get_state()) == {"current_index": 0, "current_epoch": 1, "skipped": 0}
    reports = [r.as_dict() for r in src.skipped_records()]
    assert reports == [
        {"epoch": 0, "position": 5, "index": 5, "path": None, "index_in_file": 5, "cause": VEC_CAUSE},
        {"epoch": 0, "position": 21, "index": 21, "path": None, "index_in_file": 21, "cause": LABEL_CAUSE},
    ]
    assert ids(list(p)) == GOOD  # the next pass skips them again, reported again
    assert [(r.epoch, r.index) for r in src.skipped_records()] == [(0, 5), (0, 21), (1, 5), (1, 21)]


def test_skip_budget_exceeded(bad_parquet):
    with pytest.raises(RecordError) as info:
        list(pipeline(bad_parquet, on_error="skip", max_skipped=1))
    assert str(info.value) == (
        "HFStreamingSource: skipped 2 bad records in epoch 0, over the budget of 1 "
        "(max_skipped=1, max_skipped_fraction=None). Latest: record 21: "
        f"{LABEL_CAUSE[:-1]}. Raise the skip budget or fix the data."
    )
    assert info.value.index == 21
    assert ids(list(pipeline(bad_parquet, on_error="skip", max_skipped=2))) == GOOD


def test_skip_fraction_is_checked_at_the_end_of_an_unsized_pass(bad_parquet):
    assert ids(list(pipeline(bad_parquet, on_error="skip", max_skipped_fraction=0.05))) == GOOD
    with pytest.raises(RecordError, match=re.escape(
        "HFStreamingSource: skipped 2 bad records in epoch 0, over the budget of 1 "
        "(max_skipped=None, max_skipped_fraction=0.04 of 40 records). Latest: record 21: field 'label'"
    )):
        list(pipeline(bad_parquet, on_error="skip", max_skipped_fraction=0.04))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("stop", [1, 2, 5, 6])
def test_exact_resume_across_a_skipped_record(bad_parquet, stop, shuffle):
    kw = {"on_error": "skip", "shuffle": shuffle, "shuffle_buffer_size": 16}
    uninterrupted = pipeline(bad_parquet, **kw)
    reference = ids(list(uninterrupted))
    assert sorted(reference) == GOOD
    skipped = sorted(r.index for r in uninterrupted.source.skipped_records())  # stream positions
    first = pipeline(bad_parquet, **kw)
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = json_round_trip(it.get_state())
    src_state = state["source"]
    if not shuffle:
        assert src_state["skipped"] == sum(1 for b in BAD if b < src_state["current_index"])
    resumed = pipeline(bad_parquet, **kw)
    resumed.set_state(state)
    tail = list(resumed)
    assert ids(head) + ids(tail) == reference
    assert position_of(resumed.source.get_state()) == {  # the pass ended: the start of epoch 1
        "current_index": 0, "current_epoch": 1, "skipped": 0}
    # each skipped record is reported once, by the run that passed it
    first_seen = {r.index for r in first.source.skipped_records()}
    resumed_seen = [r.index for r in resumed.source.skipped_records()]
    assert first_seen.isdisjoint(resumed_seen) and sorted(first_seen | set(resumed_seen)) == skipped


def test_image_that_does_not_decode(tmp_path):
    from PIL import Image

    def png(i: int) -> bytes:
        out = io.BytesIO()
        Image.fromarray(np.full((5, 4), i, np.uint8)).save(out, format="PNG")
        return out.getvalue()

    features = datasets.Features({"image": datasets.Image(), "idx": datasets.Value("int32")})
    rows = {
        "image": [{"bytes": png(i) if i != 3 else b"not an image", "path": None} for i in range(8)],
        "idx": list(range(8)),
    }
    path = str(tmp_path / "img.parquet")
    datasets.Dataset.from_dict(rows, features=features).to_parquet(path)
    with pytest.raises(RecordError, match=re.escape(
        "HFStreamingSource: cannot convert record 3 of split 'train' (epoch 0): "
        "UnidentifiedImageError: cannot identify image file"
    )) as info:
        source(path)
    assert "construct the source with on_error='skip'" in str(info.value)
    p = pipeline(path, on_error="skip")
    assert ids(list(p)) == [0, 1, 2, 4, 5, 6, 7]
    (report,) = p.source.skipped_records()
    assert (report.position, report.index) == (3, 3)
    assert report.cause.startswith("UnidentifiedImageError: cannot identify image file")
    # loaded eagerly: a RecordError naming the field and the record, not PIL's bare error
    from datarax.sources import HFEagerConfig, HFEagerSource

    with pytest.raises(RecordError) as info:
        HFEagerSource(HFEagerConfig(name=path, split="train[2:]"))
    message = str(info.value)
    assert message.startswith(
        "HFEagerSource: field 'image' of record 1 of split 'train[2:]' does not decode as an "
        "image: UnidentifiedImageError: cannot identify image file")
    assert message.endswith(
        "Fix or filter the data (Dataset.filter), or drop the field (exclude_keys).")
    assert info.value.index == 1


def test_config_and_state_are_checked(bad_parquet):
    with pytest.raises(ConfigError, match=re.escape(
        "HFStreamingConfig: on_error must be one of ['raise', 'skip'], got 'ignore'."
    )):
        HFStreamingConfig(name="x", on_error="ignore")
    with pytest.raises(ConfigError, match="only apply with on_error='skip'"):
        HFStreamingConfig(name="x", max_skipped=3)
    src = source(bad_parquet, on_error="skip")
    with pytest.raises(StateError, match=re.escape(
        "HFStreamingSource state 'skipped' must be an int in [0, 2] (records skipped as bad "
        "before position 2), got 3; pass the dict HFStreamingSource.get_state() returned."
    )):
        src.set_state({"current_index": 2, "current_epoch": 0, "skipped": 3})
    with pytest.raises(StateError, match=r"'skipped' must be an int in \[0, 2\] .*, got -1;"):
        src.set_state({"current_index": 2, "current_epoch": 0, "skipped": -1})


@pytest.mark.parametrize("chunk_size", [8, 64])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_broken_skip_budget_raises_at_the_batch_that_passes_the_record(
        bad_parquet, chunk_size, prefetch):
    """Every batch before the over-budget record (21) is handed out, whatever the
    chunk the stream reads ahead; the batch that would pass it raises, and so does a
    retry or a resume of the state taken then."""
    p = Pipeline(source=source(bad_parquet, on_error="skip", max_skipped=1,
                               chunk_size=chunk_size),
                 stages=[], batch_size=4, rngs=nnx.Rngs(0), prefetch=prefetch)
    served = []
    with pytest.raises(RecordError, match="skipped 2 bad records in epoch 0, over the budget"):
        for batch in p:
            served.append(batch)
    assert ids(served) == [i for i in GOOD if i < 21][:20]
    state = json_round_trip(p.get_state())
    with pytest.raises(RecordError, match="over the budget of 1"):
        next(iter(p))
    resumed = Pipeline(source=source(bad_parquet, on_error="skip", max_skipped=1,
                                     chunk_size=chunk_size),
                       stages=[], batch_size=4, rngs=nnx.Rngs(0), prefetch=prefetch)
    resumed.set_state(state)
    with pytest.raises(RecordError, match="over the budget of 1"):
        next(iter(resumed))


def test_images_of_several_sizes_point_to_convert_and_decode_images(tmp_path):
    from PIL import Image

    def png(height: int) -> bytes:
        out = io.BytesIO()
        Image.fromarray(np.zeros((height, 4), np.uint8)).save(out, format="PNG")
        return out.getvalue()

    features = datasets.Features({"image": datasets.Image()})
    path = str(tmp_path / "img.parquet")
    datasets.Dataset.from_dict({"image": [{"bytes": png(5 + i), "path": None} for i in range(2)]},
                               features=features).to_parquet(path)
    with pytest.raises(DataraxError) as info:
        source(path)
    assert str(info.value).endswith(
        "holds images of different shapes (record 0 is (5, 4), record 1 is (6, 4)); resize them "
        "to one shape first (Dataset.map), convert the dataset (datarax convert) and read it with "
        "decode=datarax.decode_images(...), which cuts each image to one size, or drop the field "
        "(exclude_keys).")
