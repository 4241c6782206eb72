"""SourcePosition: moves are seen by nnx.state and restored by nnx.update."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.position import SourcePosition
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
    assert all(v.dtype == np.int64 and v.shape == () for v in values.values())


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
    assert fresh.source.get_state() == {"current_index": 8, "current_epoch": 0}
    assert [b["x"].tolist() for b in fresh] == expected


def test_a_position_restored_as_a_jax_array_moves_on():
    pos = SourcePosition()
    pos.index_var.set_raw_value(jnp.asarray(5))  # what a restore (Orbax, nnx.update) may leave
    pos.advance(1)
    assert pos.get_state() == {"current_index": 6, "current_epoch": 0}
