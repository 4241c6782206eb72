"""TFDSStreamingSource bad records: on_error='raise' | 'skip', skip budget, exact resume.

Offline: a tiny TFDS dataset prepared in a tmp dir whose records 5, 13 and 14 hold an
int64 value past int32 (they fail to decode while x64 is off), and a data source that
cannot read one record (an I/O error on fetch).
"""

from __future__ import annotations


import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from datarax.core.errors import ConfigError, RecordError, StateError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import (  # noqa: E402
    TFDSEagerConfig,
    TFDSStreamingConfig,
    TFDSStreamingSource,
    from_tfds,
)
from datarax.sources.tfds import streaming as tfds_streaming  # noqa: E402
from datarax.sources.epoch_order import EpochOrder  # noqa: E402
from datarax.sources.skip_ledger import ErrorPolicy  # noqa: E402
from datarax.testing import json_round_trip  # noqa: E402
from tfds_datasets import prepare  # noqa: E402

N = 24
BAD = (5, 13, 14)  # ids whose "big" field does not fit int32
SEED = 3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """datarax_flaky: 24 train records: id (int32) and big (int64; past int32 for the BAD ids)."""
    return prepare(tmp_path_factory.mktemp("tfds_flaky"), "DataraxFlaky", {
        "id": tfds.features.Tensor(shape=(), dtype=np.int32),
        "big": tfds.features.Tensor(shape=(), dtype=np.int64),
    }, {"train": {i: {"id": i, "big": 2**40 + i if i in BAD else i} for i in range(N)}})


@pytest.fixture(scope="module")
def split_ids(data_dir) -> list[int]:
    """The id at each position of the prepared split (TFDS's order, not id order)."""
    data = tfds.data_source("datarax_flaky", split="train", data_dir=data_dir, download=False)
    ids = [int(data[p]["id"]) for p in range(len(data))]
    assert sorted(ids) == list(range(N)) and ids[0] not in BAD  # record 0 gives the spec
    return ids


def bad_positions(split_ids: list[int]) -> list[int]:
    return [p for p, i in enumerate(split_ids) if i in BAD]


def make(data_dir: str, **kw) -> TFDSStreamingSource:
    kw.setdefault("num_threads", 2)
    return TFDSStreamingSource(
        TFDSStreamingConfig(name="datarax_flaky", data_dir=data_dir, download=False, **kw)
    )


def ids(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b["id"])]


def overflow(bad_id: int) -> str:
    """The decoder's 64-bit refusal, in datarax's words (no type name, no closing period)."""
    return (
        f"field 'big' is int64 and holds {2**40 + bad_id}, outside the int32 "
        "range, so it cannot be cast to int32 without loss while jax_enable_x64 is off. "
        "Enable x64 with jax.config.update('jax_enable_x64', True), or drop the field "
        "(exclude_keys)"
    )


# ------------------------------------------------------------------- config
def test_config_error_fields_default_and_validate():
    config = TFDSStreamingConfig(name="x")
    fields = (config.on_error, config.max_skipped, config.max_skipped_fraction)
    assert fields == ("raise", None, None)
    assert config.error_policy() == ErrorPolicy()
    skip = TFDSStreamingConfig(name="x", on_error="skip", max_skipped=2, max_skipped_fraction=0.5)
    assert skip.error_policy() == ErrorPolicy("skip", 2, 0.5)
    for kw, message in [
        (dict(on_error="ignore"), "on_error must be one of ['raise', 'skip'], got 'ignore'."),
        (dict(max_skipped=3), "max_skipped / max_skipped_fraction only apply with "
         "on_error='skip'; set on_error='skip' or leave them None."),
        (dict(on_error="skip", max_skipped=-1), "max_skipped must be an int >= 0 or None, got -1."),
        (dict(on_error="skip", max_skipped=True),
         "max_skipped must be an int >= 0 or None, got True."),
        (dict(on_error="skip", max_skipped_fraction=1.5),
         "max_skipped_fraction must be None or a number in [0, 1], got 1.5."),
    ]:
        with pytest.raises(ConfigError) as err:
            TFDSStreamingConfig(name="x", **kw)
        assert str(err.value) == f"TFDSStreamingConfig: {message}"
    with pytest.raises(TypeError):  # the eager source reads the split once; no skipping
        TFDSEagerConfig(name="x", on_error="skip")


def test_from_tfds_error_options_mean_streaming(data_dir):
    source = from_tfds("datarax_flaky", data_dir=data_dir, download=False, on_error="skip")
    assert isinstance(source, TFDSStreamingSource)
    with pytest.raises(ConfigError) as err:
        from_tfds("datarax_flaky", streaming=False, data_dir=data_dir, on_error="skip")
    assert str(err.value) == (
        "from_tfds: ['on_error'] apply only to streaming (TFDSStreamingSource); drop them "
        "or pass streaming=True."
    )


# -------------------------------------------------------------- decode errors
def test_raise_names_split_record_and_cause(data_dir, split_ids):
    first = bad_positions(split_ids)[0]
    got: list[int] = []
    with pytest.raises(RecordError) as err:
        for batch in Pipeline(source=make(data_dir), stages=[], batch_size=4):
            got += ids([batch])
    assert (err.value.path, err.value.index) == (None, first)
    assert str(err.value) == (
        f"TFDSStreamingSource: cannot read record {first} of split 'train' of dataset "
        f"'datarax_flaky': {overflow(split_ids[first])}. To drop bad records instead, "
        "construct the source with on_error='skip' (they are counted and reported)."
    )
    assert got == split_ids[: first // 4 * 4]  # batches before the bad one's are served


def test_a_bad_first_record_is_named_with_its_split_and_dataset(data_dir, split_ids):
    # the first record gives the fields: its error comes from element_spec, worded alike
    first = bad_positions(split_ids)[0]
    split = f"train[{first}:]"
    with pytest.raises(RecordError) as err:
        next(iter(Pipeline(source=make(data_dir, split=split), stages=[], batch_size=4)))
    assert str(err.value) == (
        f"TFDSStreamingSource: cannot read record 0 of split '{split}' of dataset "
        f"'datarax_flaky': {overflow(split_ids[first])}. To drop bad records instead, "
        "construct the source with on_error='skip' (they are counted and reported)."
    )
    assert (err.value.path, err.value.index) == (None, 0)


def test_skip_drops_counts_and_reports(data_dir, split_ids):
    source = make(data_dir, on_error="skip")
    pipeline = Pipeline(source=source, stages=[], batch_size=5)
    good = [i for i in split_ids if i not in BAD]
    assert ids(list(pipeline)) == good
    # the pass is over: the state is the start of epoch 1 (none skipped there yet)
    state = source.get_state()
    assert state.pop("settings")["on_error"] == "skip"
    assert state == {
        "current_index": 0, "current_epoch": 1, "skipped": 0, "prefetch_cache": 0
    }
    reports = source.skipped_records()
    positions = bad_positions(split_ids)
    assert [(r.epoch, r.position, r.index, r.path, r.index_in_file) for r in reports] == [
        (0, p, p, None, p) for p in positions
    ]
    assert [r.cause for r in reports] == [overflow(split_ids[p]) for p in positions]
    assert ids(list(pipeline)) == good  # the count is per epoch; reports accumulate
    assert [r.epoch for r in source.skipped_records()] == [0] * len(BAD) + [1] * len(BAD)


@pytest.mark.parametrize("budget", [dict(max_skipped=2), dict(max_skipped_fraction=0.1)])
def test_skip_budget_exceeded(data_dir, split_ids, budget):
    last = bad_positions(split_ids)[-1]
    with pytest.raises(RecordError) as err:
        list(Pipeline(source=make(data_dir, on_error="skip", **budget), stages=[], batch_size=4))
    limits = (f"max_skipped={budget.get('max_skipped')}, "
              f"max_skipped_fraction={budget.get('max_skipped_fraction')}")
    assert str(err.value) == (
        "TFDSStreamingSource: split 'train' of dataset 'datarax_flaky': skipped 3 bad records "
        f"in epoch 0, over the budget of 2 ({limits} of {N} records). Latest: "
        f"record {last}: {overflow(split_ids[last])}. Raise the skip budget or fix the data."
    )
    assert (err.value.path, err.value.index) == (None, last)
    # exactly at the budget: served
    assert len(ids(list(Pipeline(source=make(data_dir, on_error="skip", max_skipped=3),
                                 stages=[], batch_size=4)))) == N - len(BAD)


def test_resume_across_skipped_records_is_exact(data_dir, split_ids):
    def build() -> Pipeline:
        source = make(data_dir, on_error="skip", max_skipped=len(BAD), shuffle=True, seed=SEED)
        return Pipeline(source=source, stages=[], batch_size=5)

    reference = build()
    full = [ids(list(reference)) for _ in range(2)]
    assert sorted(full[1]) == sorted(set(range(N)) - set(BAD)) and full[0] != full[1]
    bad = set(bad_positions(split_ids))
    seen_skipped = set()
    for k in range(1, 5):  # stop after every batch of epoch 1 but the last
        pipeline = build()
        list(pipeline)
        it = iter(pipeline)
        head = [next(it) for _ in range(k)]
        state = json_round_trip(it.get_state())
        source_state = state["source"]
        assert set(source_state) == {"current_index", "current_epoch", "skipped", "prefetch_cache"}
        order = EpochOrder(N, SEED, 1).indices(0, source_state["current_index"]).tolist()
        assert source_state["skipped"] == len(bad & set(order))
        seen_skipped.add(source_state["skipped"])
        resumed = build()
        resumed.set_state(state)
        assert ids(head) + ids(list(resumed)) == full[1]
        # skips counted once (the budget is exactly len(BAD)); the pass ended, so the
        # source stands at the start of pass 2
        assert (resumed.source.epoch, resumed.source.index) == (2, 0)
        assert resumed.source.get_state()["skipped"] == 0
    assert len(seen_skipped) > 1  # stop points before and after skipped records


def test_state_skipped_checked(data_dir):
    source = make(data_dir, on_error="skip")
    source.set_state({"current_index": 4, "current_epoch": 0})  # older states: no skips yet
    state = source.get_state()
    assert state.pop("settings")["name"] == "datarax_flaky"
    assert state == {
        "current_index": 4, "current_epoch": 0, "skipped": 0, "prefetch_cache": 0
    }
    with pytest.raises(StateError) as err:
        source.set_state({"current_index": 1, "current_epoch": 0, "skipped": 2})
    assert err.value.field == "skipped"
    assert str(err.value) == (
        "TFDSStreamingSource state 'skipped' must be an int in [0, 1] (records skipped as "
        "bad before position 1), got 2; pass the dict TFDSStreamingSource.get_state() "
        "returned."
    )
    with pytest.raises(StateError, match=r"'skipped' must be an int in \[0, 1\] .*, got -1;"):
        source.set_state({"current_index": 1, "current_epoch": 0, "skipped": -1})


# --------------------------------------------------------------- read errors
class _Unreadable:
    """A TFDS data source whose record ``bad`` cannot be read (an I/O error)."""

    def __init__(self, data, bad: int) -> None:
        self.data, self.bad = data, bad

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        if index == self.bad:
            raise OSError(f"checksum mismatch in the chunk holding record {index}")
        return self.data[index]

    def __getitems__(self, keys):
        if self.bad in keys:
            raise OSError("checksum mismatch")
        return [self.data[k] for k in keys]


@pytest.fixture()
def unreadable(monkeypatch):
    opened = tfds_streaming.open_data_source

    def open_with_bad_record(config, where):
        data, info = opened(config, where)
        return _Unreadable(data, 9), info

    monkeypatch.setattr(tfds_streaming, "open_data_source", open_with_bad_record)


def test_unreadable_record_raise_or_skip(data_dir, split_ids, unreadable):
    with pytest.raises(RecordError) as err:  # only "id": every record decodes
        list(Pipeline(source=make(data_dir, include_keys=("id",)), stages=[], batch_size=4))
    assert str(err.value) == (
        "TFDSStreamingSource: cannot read record 9 of split 'train' of dataset "
        "'datarax_flaky': OSError: checksum mismatch in the chunk holding record 9. To drop "
        "bad records instead, construct the source with on_error='skip' (they are counted "
        "and reported)."
    )
    source = make(data_dir, on_error="skip", include_keys=("id",))
    got = ids(list(Pipeline(source=source, stages=[], batch_size=4)))
    assert got == split_ids[:9] + split_ids[10:]
    assert [(r.index, r.cause) for r in source.skipped_records()] == [
        (9, "OSError: checksum mismatch in the chunk holding record 9")
    ]


# ------------------------------------------------ resume anywhere, record by record
def _epochs(pipeline: Pipeline, count: int) -> list[list[int]]:
    """``count`` epochs of ``pipeline``, batch by batch (ids of each batch)."""
    return [[ids([b]) for b in pipeline] for _ in range(count)]


# each kind and each share once by default; the other two pairs with -m slow
@pytest.mark.parametrize(("streaming", "shard_index"), [
    (True, 0), (False, 1), pytest.param(True, 1, marks=pytest.mark.slow),
    pytest.param(False, 0, marks=pytest.mark.slow)])
def test_resume_at_every_batch_of_three_shuffled_sharded_epochs(data_dir, streaming, shard_index):
    """A state saved after any batch of any epoch (shuffled, one of two shares, bad
    records skipped when streaming) resumes with exactly the batches an uninterrupted
    run serves next, through the following epochs."""
    extra = dict(on_error="skip", max_skipped=len(BAD)) if streaming else {}

    def build(index: int = shard_index) -> Pipeline:
        source = from_tfds("datarax_flaky", streaming=streaming, data_dir=data_dir,
                           download=False, shuffle=True, seed=SEED,
                           **({"exclude_keys": ("big",)} if not streaming else extra))
        return Pipeline(source=source, stages=[], batch_size=5, shard_index=index,
                        shard_count=2)

    other = _epochs(build(1 - shard_index), 3)  # the other share: together, every record
    reference = _epochs(build(), 3)
    flat = [b for epoch in reference for b in epoch]
    assert reference[0] != reference[1] != reference[2]  # reshuffled each epoch
    good = sorted(set(range(N)) - set(BAD)) if streaming else list(range(N))
    for mine, theirs in zip(reference, other):  # every good record once per epoch
        assert sorted(i for b in mine + theirs for i in b) == good
    for stop in range(len(flat)):
        pipeline = build()
        epoch, done = 0, stop
        while done >= len(reference[epoch]):  # whole epochs first
            list(pipeline)
            done -= len(reference[epoch])
            epoch += 1
        it = iter(pipeline)
        head = [ids([next(it)]) for _ in range(done)]
        assert head == reference[epoch][:done]
        state = json_round_trip(it.get_state())
        resumed = build()
        resumed.set_state(state)
        rest = [ids([b]) for b in resumed]
        assert rest == reference[epoch][done:], (epoch, done)
        following = [[ids([b]) for b in resumed] for _ in range(epoch + 1, 3)]
        assert following == reference[epoch + 1:], (epoch, done)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_broken_budget_stops_at_the_batch_passing_the_record_and_again_on_resume(
        data_dir, split_ids, prefetch):
    """With max_skipped=2 the third bad record breaks the budget: every batch before the
    one that would pass it is served, and a state saved before that batch meets the same
    error on resume."""
    def build() -> Pipeline:
        return Pipeline(source=make(data_dir, on_error="skip", max_skipped=2), stages=[],
                        batch_size=2, prefetch=prefetch)

    third = bad_positions(split_ids)[2]
    good_before = [i for i in split_ids[:third] if i not in BAD]
    it = iter(build())
    served, states = [], []
    with pytest.raises(RecordError, match="skipped 3 bad records") as err:
        while True:
            states.append(json_round_trip(it.get_state()))
            served.append(ids([next(it)]))
    assert [i for b in served for i in b] == good_before[:len(good_before) // 2 * 2]
    assert len(served) == len(good_before) // 2
    message = str(err.value)
    resumed = build()
    resumed.set_state(states[-1])
    with pytest.raises(RecordError) as again:
        list(resumed)
    assert str(again.value) == message
