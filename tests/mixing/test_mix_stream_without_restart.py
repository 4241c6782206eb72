"""A mixture of streams without ``restart``: a new pass from inside a pass is refused
naming why (the mixture reads a moved stream from its pass's start) and the fix, and the
position stays where the pass was asked from."""

import re

import numpy as np
import pytest

from datarax.core.errors import SourceContractError, StaleIteratorError
from datarax.core.spec import array_to_spec_strip_leading
from datarax.core.stream import StreamSource, StructuralConfig
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline


class OneGenerator(StreamSource):
    """Records ``lo .. lo + 9`` from one generator, never re-created (no ``restart``)."""

    def __init__(self, lo: int) -> None:
        super().__init__(StructuralConfig())
        self.records = iter(range(lo, lo + 10))

    def get_batch(self, batch_size):
        values = [v for _, v in zip(range(batch_size), self.records)]
        return {"x": np.asarray(values, np.int32)} if values else None

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros(1, np.int32))}


def mixture(prefetch: int = 2) -> Pipeline:
    mix = MixSource({"a": OneGenerator(0), "b": OneGenerator(100)}, [1, 1], seed=0,
                    records_per_epoch=12)
    return Pipeline(source=mix, batch_size=4, prefetch=prefetch)


def ids(pipeline):
    return [b["x"].tolist() for b in pipeline]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_loop_after_a_break_names_the_mixture_moving_its_stream_back_and_the_fix(prefetch):
    whole = ids(mixture(prefetch))
    pipeline = mixture(prefetch)
    kept = iter(pipeline)
    for batch in kept:
        break
    assert batch["x"].tolist() == whole[0]
    with pytest.raises(SourceContractError) as refused:
        for batch in pipeline:
            pass
    message = str(refused.value)
    assert re.match(r"MixSource source '[ab]' \(OneGenerator\) cannot serve its draw \d+: the "
                    "stream does not stand at that draw, so the mixture reads it again from "
                    "the start of its pass 0, but OneGenerator already read into that pass "
                    "and does not implement restart", message)
    assert "a batch that failed after its read" not in message
    assert ("Implement restart(self, epoch) in OneGenerator (reopen the file, re-create the "
            "generator); or continue the pass: keep its iterator (it = iter(pipeline)) and "
            "loop over it again after a break (a refused loop ends the old one), or build "
            "the mixture again over new streams and set_state a state saved in this pass "
            "(pipeline.get_state() still holds where it stands).") in message
    with pytest.raises(StaleIteratorError):  # why the old iterator cannot go on now
        next(kept)
    state = pipeline.get_state()
    assert (state["epoch"], state["position"]) == (0, 4)  # the pass it was asked from
    resumed = mixture(prefetch)
    resumed.set_state(state)
    assert ids(resumed) == whole[1:]


def test_a_mixture_of_streams_without_restart_goes_on_in_the_same_iterator():
    whole = ids(mixture())
    it = iter(mixture())
    for batch in it:
        break
    assert [batch["x"].tolist()] + [b["x"].tolist() for b in it] == whole
