"""A source built from others checks each child's batch against the child's own
``element_spec()`` and names the child: a stream child that breaks its spec was
reported as a ``KeyError``, a NumPy ``ValueError`` or a dtype widened by the join
(``float64`` for int32 joined with float32), named on the wrapper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import SpecMismatchError
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    FlatMapSource,
    InterleaveSource,
    ShuffleBufferSource,
    StreamSource,
)

from number_sources import numbers


@dataclass(frozen=True)
class LiarConfig(StructuralConfig):
    served: str = "dtype"


class Liar(StreamSource):
    """Declares ``x: int32``; serves three records of float32 ``x`` (``served="dtype"``),
    of shape (2,) (``"shape"``) or as ``y`` (``"field"``)."""

    def __init__(self, served: str) -> None:
        super().__init__(LiarConfig(served=served))
        self.left = 0

    def restart(self, epoch: int) -> None:
        self.left = 3

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        n = min(batch_size, self.left)
        self.left -= n
        x = np.arange(n, dtype=np.int32)
        served = self.config.served
        if not n:
            return None
        if served == "dtype":
            return {"x": x.astype(np.float32)}
        return {"x": np.stack([x, x], 1)} if served == "shape" else {"y": x}

    def element_spec(self) -> dict[str, Any]:
        return {"x": jax.ShapeDtypeStruct((), np.int32)}


WRAPPERS = {
    "InterleaveSource source 1 (Liar)":
        lambda liar: InterleaveSource([numbers(0, 3), liar], cycle_length=2),
    "ConcatSource part 1 (Liar)": lambda liar: ConcatSource([numbers(0, 3), liar]),
    "MixSource source 'liar' (Liar)":
        lambda liar: MixSource({"good": numbers(0, 3), "liar": liar}, {"good": 1, "liar": 1},
                               records_per_epoch=4),
    "ShuffleBufferSource parent (Liar)":
        lambda liar: ShuffleBufferSource(liar, buffer_size=2, seed=0),
    "FlatMapSource parent (Liar)":
        lambda liar: FlatMapSource(liar, lambda record: [record], max_outputs=1),
}
PROBLEMS = {
    "dtype": "field 'x' has dtype float32, declared int32",
    "shape": r"field 'x' has per-record shape \(2,\), declared \(\)",
    "field": "field 'x' is declared in element_spec\\(\\) but missing; field 'y' is not "
             "declared",
}


@pytest.mark.parametrize("served", sorted(PROBLEMS))
@pytest.mark.parametrize("child", sorted(WRAPPERS))
def test_a_child_batch_that_breaks_its_spec_is_refused_naming_the_child(child, served):
    source = WRAPPERS[child](Liar(served))
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(SpecMismatchError,
                       match=rf"^{re.escape(child)} batch at "
                             rf"position 0 of pass 0 does not match element_spec\(\): "
                             rf"{PROBLEMS[served]}"):
        for _ in pipeline:
            pass
