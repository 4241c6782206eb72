"""SourcePosition: moves are seen by nnx.state and restored by nnx.update, whichever
way the value is stored (the fast slot store, or flax's checked set_raw_value)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core import position as position_module
from datarax.core.position import SourcePosition
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


@pytest.fixture(params=["slot", "set_raw_value"])
def store(request, monkeypatch):
    if request.param == "set_raw_value":
        monkeypatch.setattr(position_module, "_RAW_SLOT", None)
    return request.param


def test_advance_and_move_are_what_nnx_state_carries(store):
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


def test_a_copied_state_restores_the_pipeline_exactly(store):
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


def test_a_variable_holding_something_else_takes_the_checked_path(monkeypatch):
    pos = SourcePosition()
    calls = []
    original = nnx.Variable.set_raw_value

    def spy(self, value, **kwargs):
        calls.append(value)
        return original(self, value, **kwargs)

    monkeypatch.setattr(nnx.Variable, "set_raw_value", spy)
    pos.advance(1)
    assert calls == []  # a NumPy scalar in the slot: stored directly
    # a restore (Orbax, nnx.update) may leave a jax.Array there
    pos.index_var.set_raw_value(jnp.asarray(5))
    calls.clear()
    pos.advance(1)
    assert len(calls) == 1 and int(calls[0]) == 6
