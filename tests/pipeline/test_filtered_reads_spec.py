"""A filtered pass over a stream asks its spec (plain fields, text) once, not per read
(``datarax.pipeline.driver_cursor.FilteredReads``, through
``datarax.pipeline.pass_spec.PassSpec``); every batch is still checked, and a batch with
list fields is still filtered on the host."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import SpecMismatchError
from datarax.operators import FilterOperator
from datarax.pipeline import Pipeline, pass_spec


class Numbers(DataSourceModule):
    """A stream of ``n`` records ``i``; ``as_lists``: fields as lists; ``bad_at``: the
    read from that record holds float64, not the declared int32."""

    def __init__(self, n: int, as_lists: bool = False, bad_at: int | None = None) -> None:
        super().__init__(StructuralConfig())
        self.n, self.at, self.as_lists, self.bad_at = n, 0, as_lists, bad_at

    def element_spec(self):
        return {"i": jax.ShapeDtypeStruct((), jnp.int32)}

    def restart(self, epoch):
        self.at = 0

    def get_batch(self, batch_size):
        if self.at >= self.n:
            return None
        hi = min(self.at + batch_size, self.n)
        dtype = np.float64 if self.at == self.bad_at else np.int32
        values = np.arange(self.at, hi, dtype=dtype)
        self.at = hi
        return {"i": list(values) if self.as_lists else values}  # lists of int32


def _odd(el):
    return el.data["i"] % 2 == 1


@pytest.fixture
def text_asked(monkeypatch):
    asked = []

    def has_text(spec):
        asked.append(spec)
        return False

    monkeypatch.setattr(pass_spec, "has_text", has_text)
    return asked


@pytest.mark.parametrize("as_lists", [False, True], ids=["arrays", "lists"])
def test_the_spec_is_asked_once_a_pass_and_the_kept_records_are_those_of_the_predicate(
        text_asked, as_lists):
    pipeline = Pipeline(Numbers(20, as_lists), stages=[FilterOperator(predicate=_odd)],
                        batch_size=4)
    batches = [np.asarray(b["i"]).tolist() for b in pipeline]
    assert batches == [[1, 3, 5, 7], [9, 11, 13, 15], [17, 19]]
    # the pass read 9 times (4, then 4 - kept so far, ...) and made 3 batches: asked once
    # by the filter's reads, once by the HostPass finishing the kept batches
    assert len(text_asked) == 2


def test_every_read_is_still_checked_against_the_spec():
    pipeline = Pipeline(Numbers(20, bad_at=8), stages=[FilterOperator(predicate=_odd)],
                        batch_size=4)
    it = iter(pipeline)
    assert np.asarray(next(it)["i"]).tolist() == [1, 3, 5, 7]
    with pytest.raises(SpecMismatchError, match=r"^Numbers records at 8 of epoch 0 does not "
                                                r"match element_spec\(\): field 'i' "):
        next(it)
