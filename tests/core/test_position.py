"""SourcePosition: moves are seen by nnx.state and restored by nnx.update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import StateError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.core.position import DIGEST_SIZE, SourcePosition, differing_settings, settings_digest
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def test_advance_and_move_are_what_nnx_state_carries():
    pos = SourcePosition()
    pos.advance(3)
    pos.advance(2)
    assert pos.get_state() == {"current_index": 5, "current_epoch": 0}
    pos.move(4, 7)
    state = nnx.state(pos)
    assert int(state["index_var"].get_value()) == 7
    assert int(state["epoch_var"].get_value()) == 4
    values = {k: np.asarray(v.get_value()).copy() for k, v in state.flat_state()}
    assert all(values[(k,)].dtype == np.int64 and values[(k,)].shape == ()
               for k in ("epoch_var", "index_var"))
    assert values[("settings_var",)].shape == (DIGEST_SIZE,)  # small: a digest, not data
    assert not values[("settings_var",)].any()  # not taken until an owner positions it


def test_a_copied_state_restores_the_pipeline_exactly():
    def build():
        src = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                           {"x": np.arange(20, dtype=np.int32)})
        return Pipeline(source=src, batch_size=4, rngs=nnx.Rngs(0))

    pipeline = build()
    iterator = iter(pipeline)
    next(iterator), next(iterator)
    saved = nnx.clone(nnx.state(pipeline))  # a copy: nnx.state shares the Variables
    expected = [b["x"].tolist() for b in iterator]
    assert len(expected) == 3

    fresh = build()
    nnx.update(fresh, saved)
    assert fresh.source.get_state() == {"current_index": 8, "current_epoch": 0,
                                        "settings": {"shuffle": True, "seed": 3},
                                        "records": 20}
    assert [b["x"].tolist() for b in fresh] == expected


def test_a_position_restored_as_a_jax_array_moves_on():
    pos = SourcePosition()
    pos.index_var.set_raw_value(jnp.asarray(5))  # what a restore (Orbax, nnx.update) may leave
    pos.advance(1)
    assert pos.get_state() == {"current_index": 6, "current_epoch": 0}


def _memory_pipeline(seed: int = 3, shuffle: bool = True, records: int = 20) -> Pipeline:
    src = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed),
                       {"x": np.arange(records, dtype=np.int32)})
    return Pipeline(source=src, batch_size=4, rngs=nnx.Rngs(0))


def _saved_after_two_batches() -> nnx.State:
    pipeline = _memory_pipeline()
    iterator = iter(pipeline)
    next(iterator), next(iterator)
    return nnx.clone(nnx.state(pipeline))


@pytest.mark.parametrize(("change", "named"), [({"seed": 4}, "seed=4"),
                                               ({"shuffle": False}, "shuffle=False"),
                                               ({"records": 21}, "records=21")])
def test_an_nnx_state_restored_into_other_order_settings_is_refused(change, named):
    fresh = _memory_pipeline(**change)
    nnx.update(fresh, _saved_after_two_batches())
    with pytest.raises(StateError, match=f"MemorySource: the position restored .*{named}"):
        next(iter(fresh))
    with pytest.raises(StateError, match=named):  # the source's own reads refuse too
        _ = fresh.source.epoch


def test_an_nnx_state_restored_as_jax_arrays_is_checked_too():
    """Orbax restores nnx state leaves as jax Arrays: the digest is compared the same."""
    saved = jax.tree.map(jnp.asarray, _saved_after_two_batches())
    same, other = _memory_pipeline(), _memory_pipeline(seed=9)
    nnx.update(same, saved)
    nnx.update(other, saved)
    assert (same.source.epoch, same.source.index) == (0, 8)
    with pytest.raises(StateError, match="seed=9"):
        iter(other)


def test_a_position_saved_before_its_settings_were_taken_still_restores():
    pos = SourcePosition()
    pos.move(0, 8)
    fresh = _memory_pipeline(seed=9)
    nnx.update(fresh.source.datarax_position, nnx.state(pos))  # an all-zero digest
    assert (fresh.source.epoch, fresh.source.index) == (0, 8)


def test_a_position_saved_before_the_record_count_was_in_the_digest_still_restores():
    saved = _saved_after_two_batches()  # as datarax saved it before: no "records"
    earlier = {"class": "MemorySource", "shuffle": True, "seed": 3}
    saved["source"]["datarax_position"]["settings_var"].set_value(settings_digest(earlier))
    fresh = _memory_pipeline()
    nnx.update(fresh, saved)
    assert [b["x"].tolist() for b in fresh] == [b["x"].tolist() for b in _memory_pipeline()][2:]


def _sharded_after_two_batches(index: int, count: int) -> nnx.State:
    pipeline = Pipeline(source=_memory_pipeline().source, batch_size=4, rngs=nnx.Rngs(0),
                        shard_index=index, shard_count=count)
    iterator = iter(pipeline)
    next(iterator), next(iterator)
    return nnx.clone(nnx.state(pipeline))


@pytest.mark.parametrize(("index", "count"), [(0, 1), (0, 3), (1, 2)])
def test_an_nnx_state_of_another_share_is_refused(index, count):
    """A position counts its share's records: restored into another process's share or
    another process count it would serve records twice or leave them out in silence."""
    fresh = Pipeline(source=_memory_pipeline().source, batch_size=4, rngs=nnx.Rngs(0),
                     shard_index=index, shard_count=count)
    nnx.update(fresh, _sharded_after_two_batches(0, 2))
    with pytest.raises(StateError, match=f"position restored .*shard='{index} of {count}'"):
        next(iter(fresh))


def test_an_nnx_state_of_the_same_share_restores_even_after_direct_reads():
    """The digest is taken again when the Pipeline gives the source its share, so a
    source read directly before (its digest taken unsharded) saves the share it serves."""
    def build():
        source = _memory_pipeline().source
        next(iter(source))  # a direct read takes the digest before the share is set
        return Pipeline(source=source, batch_size=2, rngs=nnx.Rngs(0),
                        shard_index=1, shard_count=2)

    reference = [b["x"].tolist() for b in build()]
    old = build()
    iterator = iter(old)
    next(iterator)
    fresh = build()
    nnx.update(fresh, nnx.clone(nnx.state(old)))
    assert [b["x"].tolist() for b in fresh] == reference[1:]


def test_a_position_saved_before_the_share_was_in_the_digest_still_restores():
    saved = _saved_after_two_batches()  # as datarax saved it before: no "shard"
    earlier = {"class": "MemorySource", "shuffle": True, "seed": 3, "records": 20}
    saved["source"]["datarax_position"]["settings_var"].set_value(settings_digest(earlier))
    fresh = _memory_pipeline()
    nnx.update(fresh, saved)
    assert [b["x"].tolist() for b in fresh] == [b["x"].tolist() for b in _memory_pipeline()][2:]


def test_settings_digest_names_what_differs():
    settings = {f"children[{i}].seed": i for i in range(6)} | {"weights": (1, 2)}
    saved = settings_digest(settings)
    assert differing_settings(settings, saved) == []
    changed = {**settings, "children[4].seed": 40}
    assert "children[4].seed" in differing_settings(changed, saved)
    assert saved.shape == (DIGEST_SIZE,) and saved[-1] == 1


@pytest.mark.parametrize("first_read", ["for", "next"])
def test_an_nnx_state_of_a_directly_iterated_source_is_refused_by_other_settings(first_read):
    """Records read with ``for r in source`` / ``next(source)`` (no Pipeline) carry the
    settings too: the position is not restored into a source shuffled otherwise."""

    def source(seed):
        return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                            {"x": np.arange(20, dtype=np.int32)})

    used = source(3)
    if first_read == "for":
        for _, _ in zip(range(5), used):
            pass
    else:
        for _ in range(5):
            next(used)
    saved = nnx.clone(nnx.state(used))
    same, other = source(3), source(4)
    nnx.update(same, saved)
    nnx.update(other, saved)
    assert [int(r["x"]) for r in same] == [int(r["x"]) for r in used]  # the rest of the pass
    with pytest.raises(StateError, match="MemorySource: the position restored .*seed=4"):
        next(iter(other))


def _noisy(element, key):
    return element.update_data({"u": jax.random.uniform(key, ())})


def _noisy_pipeline(batch_size: int) -> Pipeline:
    src = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                       {"x": np.arange(20, dtype=np.int32)})
    stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noisy)
    return Pipeline(source=src, stages=[stage], batch_size=batch_size, rngs=nnx.Rngs(0))


def _records(batches) -> list[tuple[int, float]]:
    return [(int(x), float(u)) for b in batches
            for x, u in zip(np.asarray(b["x"]), np.asarray(b["u"]))]


def test_an_nnx_state_restored_into_another_batch_size_continues_the_epoch_record_by_record():
    """Allowed (unlike pipeline.set_state, whose settings include batch_size): the
    position is in records and the random values are per record, so the rest of the
    epoch comes once, with the same values, in batches of the new size."""
    pipeline = _noisy_pipeline(4)
    iterator = iter(pipeline)
    head = _records([next(iterator), next(iterator)])
    saved = nnx.clone(nnx.state(pipeline))
    fresh = _noisy_pipeline(3)
    nnx.update(fresh, saved)
    batches = list(fresh)
    assert [len(b["x"]) for b in batches] == [3, 3, 3, 3]
    assert head + _records(batches) == _records(_noisy_pipeline(4))
