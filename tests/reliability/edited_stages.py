"""Stages built the same way in this process and in a child process (the ``stages``
digest of a saved state must be the same in both: no addresses, no salted hashes)."""

from __future__ import annotations

import numpy as np
from flax import nnx

from datarax.operators import ElementOperator, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def divisible_by(k: int):
    return lambda el: el.data["x"] % k == 0


def pipeline(k: int = 2, scale: float = 10.0) -> Pipeline:
    """A filter from a factory's closure, then a map whose closure holds an array, a set
    constant, a dict with string keys and a nested function."""
    table = np.array([1.0, 2.0, 4.0], np.float32)
    names = {"small": 1, "large": 2}

    def label(el, key=None):
        def bucket(x):
            return x in {"a", "b", "c"} or names["small"]

        return {**el.data, "y": el.data["x"] * scale * table[0], "b": bucket("a")}

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(12, dtype=np.int32)})
    return Pipeline(source=source, stages=[FilterOperator(predicate=divisible_by(k)),
                                           ElementOperator(fn=label)],
                    batch_size=2, rngs=nnx.Rngs(0))


def saved_digest() -> str:
    """The ``stages`` digest a state of :func:`pipeline` records."""
    return pipeline().get_state()["settings"]["stages"]
