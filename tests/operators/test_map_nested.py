"""MapOperator on a nested field: fn gets each of its arrays, one at a time."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.errors import DataraxError
from datarax.operators import MapOperator


def nested_batch():
    return {"meta": {"a": jnp.arange(3.0), "b": jnp.ones(3)}, "other": jnp.zeros(3)}


def test_fn_applies_to_each_array_of_a_chosen_nested_field():
    out = MapOperator(subtree="meta", fn=lambda a: a + 10).apply_batch(nested_batch(), None)
    assert np.asarray(out["meta"]["a"]).tolist() == [10.0, 11.0, 12.0]
    assert np.asarray(out["meta"]["b"]).tolist() == [11.0, 11.0, 11.0]
    assert np.asarray(out["other"]).tolist() == [0.0, 0.0, 0.0]


def test_a_stochastic_fn_gives_a_nested_fields_arrays_the_records_draw():
    op = MapOperator(subtree=None, fn=lambda a, k: a + jax.random.uniform(k), stochastic=True)
    out = op.apply_batch(nested_batch(), jax.random.split(jax.random.key(0), 3))
    draw = np.asarray(out["other"])
    assert len(set(draw.tolist())) == 3  # one draw per record
    np.testing.assert_allclose(np.asarray(out["meta"]["a"]), draw + np.arange(3.0))
    np.testing.assert_allclose(np.asarray(out["meta"]["b"]), draw + 1.0)


def test_fn_returning_none_inside_a_nested_field_names_its_path():
    op = MapOperator(subtree="meta", fn=lambda a: None)
    with pytest.raises(DataraxError, match=r"""fn returned None for field\(s\) \["\['meta'\]\['a'\]", "\['meta'\]\['b'\]"\]"""):
        op.apply_batch(nested_batch(), None)
