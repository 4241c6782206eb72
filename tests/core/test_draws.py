"""Draw version 2: one draw per record; values a pure function of (seed, epoch, record).

The image chain below draws every kind of value the built-in operators make from a
record's words (crop boxes, positions, flips, brightness, contrast, shifts). Each record's
output must be the same whatever the batch size, across a save and restore in the middle
of an epoch, and split over two hosts (shards), and change from epoch to epoch.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("dm_pix")

from datarax.core import draws  # noqa: E402
from datarax.core.stages import apply_stages  # noqa: E402
from datarax.operators import image as I  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import MemorySource, MemorySourceConfig  # noqa: E402

RECORDS = 30


def _chain() -> list:
    return [I.RandomResizedCrop(8, scale=(0.3, 1.0)), I.HorizontalFlip(0.5),
            I.Brightness((-0.2, 0.2)), I.Contrast((0.7, 1.3)), I.RandomCrop(6),
            I.Translate(dy=(-2, 2), dx=(-2, 2))]


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"image": rng.integers(0, 256, (RECORDS, 12, 12, 3), dtype=np.uint8),
            "id": np.arange(RECORDS, dtype=np.int32)}


def _pipeline(batch_size: int, shard: tuple[int, int] = (0, 1)) -> Pipeline:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3), _data())
    return Pipeline(source=source, stages=_chain(), batch_size=batch_size, seed=5,
                    shard_index=shard[0], shard_count=shard[1])


def _by_record(batches) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for batch in batches:
        for i, image in zip(np.asarray(batch["id"]).tolist(), np.asarray(batch["image"])):
            assert i not in out, f"record {i} served twice"
            out[i] = image.tobytes()
    return out


def _epoch(pipeline: Pipeline) -> dict[int, bytes]:
    with iter(pipeline) as it:
        return _by_record(list(it))


def test_record_values_do_not_depend_on_batch_size_resume_or_hosts() -> None:
    reference = _epoch(_pipeline(4))
    assert sorted(reference) == list(range(RECORDS))
    assert _epoch(_pipeline(7)) == reference

    saved = _pipeline(4)
    with iter(saved) as it:
        head = [next(it) for _ in range(3)]
        state = it.get_state()
    resumed = _pipeline(4)
    resumed.set_state(state)
    with iter(resumed) as it:
        tail = list(it)
    assert _by_record(head + tail) == reference

    hosts: dict[int, bytes] = {}
    for index in range(2):
        share = _epoch(_pipeline(4, (index, 2)))
        assert not set(share) & set(hosts)
        hosts.update(share)
    assert hosts == reference


def test_values_change_with_the_epoch_and_the_records_differ() -> None:
    pipeline = _pipeline(RECORDS)
    with iter(pipeline) as it:
        first = _by_record([next(it)])
    with iter(pipeline) as it:
        second = _by_record([next(it)])
    assert sorted(first) == sorted(second)
    assert sum(first[i] != second[i] for i in first) >= RECORDS - 1
    assert len(set(first.values())) == RECORDS


def test_a_saved_state_names_the_draw_version() -> None:
    pipeline = _pipeline(4)
    with iter(pipeline) as it:
        next(it)
        assert it.get_state()["settings"]["draw"] == draws.DRAW_VERSION == 2
    plain = Pipeline(source=MemorySource(MemorySourceConfig(), _data()), batch_size=4)
    assert "draw" not in plain.get_state()["settings"]  # its values do not depend on it


def test_the_chain_evaluates_threefry_a_few_times_not_per_random_call() -> None:
    """The compile cost of a stochastic step grows with the threefry evaluations in its
    program (each a call in the lowered module, inlined by XLA): the chain's six random
    operators lowered to 36 such calls with draw version 1 and lower to 7 now."""
    batch = {"image": jnp.zeros((4, 12, 12, 3), jnp.uint8)}
    lowered = jax.jit(
        lambda b, key: apply_stages(_chain(), b, jnp.arange(4), 0, key)
    ).lower(batch, jax.random.key(0)).as_text()
    assert 0 < len(re.findall(r"call @\w*threefry\w*", lowered)) <= 8


def test_uniform_and_integer_cover_their_ranges() -> None:
    words = jax.random.bits(jax.random.key(1), (20_000,), jnp.uint32)
    u = np.asarray(draws.uniform(words, -1.0, 3.0))
    assert u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 0.05
    n = np.asarray(draws.integer(words, 2, 7))
    assert sorted(set(n.tolist())) == [2, 3, 4, 5, 6]
    assert np.bincount(n - 2).min() > 3600  # 4000 expected each
    assert float(draws.uniform(words[0], 0.5, 0.5)) == 0.5
    assert int(draws.integer(words[0], 4, 5)) == 4


def test_words_take_a_keys_own_bits_then_draw() -> None:
    key = jax.random.key(9)
    data = np.asarray(jax.random.key_data(key))
    assert np.asarray(draws.words(key, 2)).tolist() == data.tolist()
    assert np.asarray(draws.words(data, 1)).tolist() == data[:1].tolist()
    many = np.asarray(draws.words(key, 22))
    assert many.shape == (22,) and len(set(many.tolist())) == 22
    assert np.asarray(draws.words(data, 22)).tolist() == many.tolist()


def _key_data(el, key):
    return {"k": jax.random.key_data(key), "id": el.data["id"]}


@pytest.mark.parametrize("with_filter", [False, True])
def test_record_keys_are_the_documented_fold_ins(with_filter: bool) -> None:
    """fold_in(fold_in(fold_in(fold_in(key(seed), 0), position), epoch), index): a pass's
    keys drawn on the host give the keys of the documented derivation, bit for bit."""
    from datarax.core.keys import record_keys
    from datarax.operators import ElementOperator, FilterOperator

    stages = [ElementOperator(fn=lambda el, key=None: el), ElementOperator(fn=_key_data,
                                                                           stochastic=True)]
    if with_filter:
        stages.insert(1, FilterOperator(predicate=lambda el: el.data["id"] % 3 != 0))
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), _data())
    pipeline = Pipeline(source=source, stages=stages, batch_size=8, seed=11)
    pipeline_key = jax.random.fold_in(jax.random.key(11), 0)
    for epoch in range(2):
        with iter(pipeline) as it:
            got = {int(i): k.tolist() for b in it
                   for i, k in zip(np.asarray(b["id"]), np.asarray(b["k"]))}
        ids = jnp.asarray(sorted(got))
        want = record_keys(jax.random.fold_in(pipeline_key, 2), epoch, ids)
        assert [got[i] for i in sorted(got)] == np.asarray(jax.random.key_data(want)).tolist()
        assert len(got) == (20 if with_filter else RECORDS)


def test_host_fold_in_is_jax_fold_in() -> None:
    from datarax.core.keys import host_fold_in

    rng = np.random.default_rng(0)
    for _ in range(50):
        key = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
        data = int(rng.integers(0, 2**32))
        want = jax.random.fold_in(jax.random.wrap_key_data(key), np.uint32(data))
        assert host_fold_in(key, data).tolist() == np.asarray(jax.random.key_data(want)).tolist()


def test_host_and_step_threefry_agree_on_many_keys() -> None:
    """The one threefry written over NumPy (host_fold_in, broadcast) and over lax
    (fold_in_rows): the same words for 4,000 (key, record) pairs, extremes included."""
    from datarax.core.keys import fold_in_rows, host_fold_in

    rng = np.random.default_rng(2)
    rows = rng.integers(0, 2**32, (40, 2), dtype=np.uint64).astype(np.uint32)
    rows[0], rows[1] = [0, 0], [2**32 - 1, 2**32 - 1]
    records = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    records[:2] = [0, 2**32 - 1]
    host = host_fold_in(rows[:, None, :], records[None, :])
    assert host.shape == (40, 100, 2)
    assert host.tolist() == np.asarray(fold_in_rows(rows, records)).tolist()
    assert host[5, 7].tolist() == host_fold_in(rows[5], int(records[7])).tolist()


def test_fold_in_rows_is_jax_fold_in() -> None:
    """The stages' record keys drawn from a pass's rows: every (row, record) pair gives
    jax.random.fold_in's key, bit for bit, traced or not, extremes included."""
    from datarax.core.keys import fold_in_rows

    rng = np.random.default_rng(1)
    rows = rng.integers(0, 2**32, (3, 2), dtype=np.uint64).astype(np.uint32)
    rows[0] = [0, 0]
    rows[1] = [2**32 - 1, 2**32 - 1]
    records = np.concatenate([[0, 1, 2**31 - 1], rng.integers(0, 2**31, 40)]).astype(np.int32)
    want = [[jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(row),
                                                    np.uint32(r))).tolist()
             for r in records] for row in rows]
    assert np.asarray(fold_in_rows(rows, records)).tolist() == want
    assert np.asarray(jax.jit(fold_in_rows)(rows, records)).tolist() == want
    top = np.asarray([2**32 - 1], np.uint32)  # a uint32 record past int32's range
    assert np.asarray(fold_in_rows(rows[:1], top)).tolist()[0][0] == jax.random.key_data(
        jax.random.fold_in(jax.random.wrap_key_data(rows[0]), top[0])).tolist()
