"""A filter first over a source read by position runs in two phases (the pass's kept
positions chosen once, then each batch read from its positions): every batch, resume,
count and ``len()`` as the one-program path gives them."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.pipeline import filtered
from datarax.pipeline.filtered_step import spec_key
from datarax.sources import MemorySource, MemorySourceConfig

N = 103  # 69 kept: batches of 23 divide them, of 8 do not


# module-level: the pipelines of a test share their compiled steps
def _keep(el):
    return el.data["label"] % 3 != 1


def _scaled(el, key=None):
    return {**el.data, "image": el.data["image"] / 255.0}


def _flipped(el, key):
    image = el.data["image"]
    return {**el.data, "image": jnp.where(jax.random.bernoulli(key), image[:, ::-1], image)}


def make(shuffle=True, batch_size=8, n=N, **kwargs):
    data = {"image": (np.arange(n * 12) % 251).astype(np.uint8).reshape(n, 4, 3),
            "label": np.arange(n, dtype=np.int32)}
    source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=3), data)
    stages = [FilterOperator(predicate=_keep), ElementOperator(fn=_scaled),
              ElementOperator(fn=_flipped, stochastic=True)]
    return Pipeline(source, stages=stages, batch_size=batch_size, seed=5, **kwargs)


def digest(batch):
    return hashlib.sha256(b"".join(
        k.encode() + np.asarray(v).tobytes() for k, v in sorted(batch.items()))).hexdigest()


def digests(pipeline, epochs=2):
    return [[digest(b) for b in pipeline] for _ in range(epochs)]


@pytest.fixture
def phases(monkeypatch):
    """``phases(two)``: pipelines built after it run in two phases (True) or in one
    program (False); returns the verdicts of ``two_phase`` seen since."""
    seen = []
    real = filtered.two_phase

    def switch(two):
        seen.clear()

        def decided(*args):
            seen.append(real(*args))
            return seen[-1] and two

        monkeypatch.setattr(filtered, "two_phase", decided)
        return seen

    return switch


# each shuffle with each size, each size with drop_remainder on and off; 16 records a
# chunk: 7 chunks to choose from, the default: one
@pytest.mark.parametrize("shuffle, size, drop, chunk_records", [
    (True, 23, False, 16), (True, 8, True, 16), (False, 8, False, 16), (False, 23, True, 16),
    (True, 8, False, filtered.CHOOSE_RECORDS)])
def test_every_batch_as_the_one_program_path(phases, monkeypatch, shuffle, size, drop,
                                             chunk_records):
    monkeypatch.setattr(filtered, "CHOOSE_RECORDS", chunk_records)
    seen = phases(True)
    two = digests(make(shuffle, size, drop_remainder=drop))
    assert seen and all(seen)
    phases(False)
    assert two == digests(make(shuffle, size, drop_remainder=drop))
    assert [len(e) for e in two] == [69 // size if drop else -(-69 // size)] * 2


def _centered(batch):  # a batch-level stage: run apart, after the kept step
    return {**batch, "image": batch["image"] - batch["image"].mean()}


def test_padded_batches_and_a_batch_level_stage_as_the_one_program_path(phases):
    for options in ({"pad_remainder": True}, {"stages": [_centered]}):
        def built(two):
            seen = phases(two)
            p = make(**{k: v for k, v in options.items() if k != "stages"})
            if "stages" in options:
                p = Pipeline(p.source, stages=[*p.stages, *options["stages"]], batch_size=8,
                             seed=5)
            return digests(p), seen
        (two, seen), (one, _) = built(True), built(False)
        assert two == one and seen and all(seen)


def test_resume_at_every_boundary_and_the_counts(phases, monkeypatch):
    monkeypatch.setattr(filtered, "CHOOSE_RECORDS", 16)  # a resume skips whole chunks
    seen = phases(True)
    p = make()
    states, want, counts = [], [], []  # per epoch: the state before each batch, ...
    for _ in range(2):
        it = iter(p)
        states.append([]), want.append([])
        while True:
            states[-1].append(p.get_state())
            counts.append(p.stats().get("filter"))
            try:
                want[-1].append(digest(next(it)))
            except StopIteration:
                break
    assert all(seen) and [len(w) for w in want] == [9, 9]
    for epoch_states, epoch_want in zip(states, want):
        for i, state in enumerate(epoch_states):
            fresh = make()
            fresh.set_state(state)
            assert [digest(b) for b, _ in zip(fresh, range(3))] == epoch_want[i:i + 3]
    phases(False)
    one = make()
    one_counts = []
    for _ in range(2):
        it = iter(one)
        while True:
            one_counts.append(one.stats().get("filter"))
            try:
                next(it)
            except StopIteration:
                break
    assert counts == one_counts and counts[-1] == {"kept": 138, "dropped": 68}
    with pytest.raises(TypeError, match="filtered epoch"):
        len(p)


def test_a_long_pass_in_groups(phases):
    seen = phases(True)
    p = make(batch_size=2, n=1600)  # >= 512 batches of 2 left: 16 batches a dispatch
    it = iter(p)
    head = [digest(next(it)) for _ in range(40)]
    state = p.get_state()
    rest = [digest(b) for b in it]
    fresh = make(batch_size=2, n=1600)
    fresh.set_state(state)
    assert [digest(b) for b in fresh] == rest
    assert all(seen)
    phases(False)
    assert [digest(b) for b in make(batch_size=2, n=1600)] == head + rest


def test_which_filters_run_in_two_phases():
    spec = spec_key({"x": jax.ShapeDtypeStruct((), np.int32)})
    first = [FilterOperator(predicate=_keep), ElementOperator(fn=_scaled)]
    assert filtered.two_phase(first, 0, spec, True)
    assert not filtered.two_phase(first[::-1], 1, spec, True)  # after another stage
    assert not filtered.two_phase(first, 0, spec, False)  # records not read by position
    assert not filtered.two_phase(first, 0, None, True)  # not all numeric
    assert filtered.choose_chunks(spec, 20_000) == (8192, 3)
    assert filtered.choose_chunks(spec, 0) == (1, 1)


def test_a_pass_past_the_most_records_keeps_the_one_program_path(monkeypatch):
    """Phase one runs before a pass's first batch (and after each restore): a pass over
    more than ``CHOOSE_MOST_RECORDS`` records keeps the one-program path, same batches."""
    chosen = []
    real = filtered.FilteredDispatch._dispatch_chosen

    def counted(self):
        chosen.append(self.epoch)
        return real(self)

    monkeypatch.setattr(filtered.FilteredDispatch, "_dispatch_chosen", counted)
    two = digests(make())
    assert chosen  # N records: two phases
    chosen.clear()
    monkeypatch.setattr(filtered, "CHOOSE_MOST_RECORDS", N - 1)
    assert digests(make()) == two and not chosen
