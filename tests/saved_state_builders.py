"""The pipelines whose saved states ``tests/pipeline/test_old_saved_states.py`` restores,
and the writer of those states (run under an earlier release's ``src``).

A stage's functions are digested with their module's name, so they live here, imported
as ``saved_state_builders`` alike by the tests (``tests/conftest.py`` puts this folder on
``sys.path``) and by the writer: ``PYTHONPATH=<that release's src> python
tests/saved_state_builders.py tests/data/saved_states <prefix> iterator|source|nnx
[builder ...]``.
"""

from __future__ import annotations

import json
import pathlib
import sys

import jax
import numpy as np
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def _numbers(n: int = 50, seed: int = 7, lo: int = 0) -> MemorySource:
    return MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                        {"x": np.arange(lo, lo + n, dtype=np.int32)})


def _jitter(element, key):
    return element.update_data({"x": element.data["x"] * 10 + jax.random.randint(key, (), 0, 10)})


def shuffled_with_stages():
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=_jitter),
              ElementOperator(fn=lambda el, key=None: el.update_data({"x": el.data["x"] + 1}))]
    return Pipeline(source=_numbers(), stages=stages, batch_size=8, rngs=nnx.Rngs(0))


def filtered():
    keep = FilterOperator(predicate=lambda el: el.data["x"] % 3 != 0)
    return Pipeline(_numbers(n=100), stages=[keep], batch_size=8)


def mixture():
    from datarax.mixing import MixSource
    mix = MixSource({"web": _numbers(50, 1), "books": _numbers(30, 2, 1000),
                     "code": _numbers(20, 3, 2000)},
                    weights={"web": 0.5, "books": 0.3, "code": 0.2}, seed=0)
    return Pipeline(source=mix, stages=[], batch_size=10)


def packed_text():
    from datarax.text import PackedTextConfig, PackedTextSource
    docs = [[1 + (i * 7 + j) % 13 for j in range(1 + (i * 5) % 9)] for i in range(40)]
    source = PackedTextSource(PackedTextConfig(seq_len=8, packing="first_fit"),
                              lambda epoch: [str(i) for i in range(len(docs))],
                              lambda text: docs[int(text)])
    return Pipeline(source, batch_size=2, rngs=nnx.Rngs(0))


def stream():
    from datarax.core.spec import array_to_spec_strip_leading
    from datarax.core.stream import StreamSource, StructuralConfig

    class Count(StreamSource):
        def __init__(self, n):
            super().__init__(StructuralConfig())
            self.n, self.next_value = n, 0

        def restart(self, epoch):
            self.next_value = 0

        def get_batch(self, batch_size):
            if self.next_value >= self.n:
                return None
            end = min(self.n, self.next_value + batch_size)
            x = np.arange(self.next_value, end, dtype=np.int32)
            self.next_value = end
            return {"x": x}

        def element_spec(self):
            return {"x": array_to_spec_strip_leading(np.zeros(1, np.int32))}

    return Pipeline(Count(30), stages=[], batch_size=4)


def _windows(doc):
    tokens = doc["x"][: int(doc["n"])]
    return [{"x": tokens[i:i + 4]} for i in range(0, len(tokens) - 3, 3)]


def flat_map():
    from datarax.sources import FlatMapSource
    docs = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                        {"x": np.arange(200, dtype=np.int32).reshape(20, 10),
                         "n": (np.arange(20, dtype=np.int32) * 7) % 11})
    return Pipeline(source=FlatMapSource(docs, _windows, max_outputs=3), stages=[],
                    batch_size=2, rngs=nnx.Rngs(0))


def taken():
    return Pipeline(source=_numbers(), stages=[], batch_size=4).take(9)


def split():
    try:
        from datarax.pipeline import Rebatch
    except ImportError:  # releases before Rebatch moved out of datarax.dag
        from datarax.dag import Rebatch
    return Rebatch(Pipeline(source=_numbers(), stages=[], batch_size=8), split=4)


BUILDERS = {f.__name__: f for f in (shuffled_with_stages, filtered, mixture, packed_text,
                                    stream, flat_map, taken, split)}


def values(batch) -> list:
    return np.asarray(batch["tokens" if "tokens" in batch else "x"]).tolist()


def leaves_to_json(tree):
    """An ``nnx.State`` pure dict as JSON: each array ``{"dtype": ..., "value": [...]}``."""
    if isinstance(tree, dict):
        return {k: leaves_to_json(v) for k, v in tree.items()}
    value = np.asarray(tree)
    return {"dtype": str(value.dtype), "value": value.tolist()}


def leaves_from_json(tree):
    """The pure dict :func:`leaves_to_json` wrote."""
    if set(tree) == {"dtype", "value"}:
        return np.asarray(tree["value"], tree["dtype"])
    return {k: leaves_from_json(v) for k, v in tree.items()}


def save_states(folder: str, prefix: str, names: list[str], route: str) -> None:
    """Write, per builder, the state after 3 batches (``route``: the iterator's, the
    source's own, or ``nnx`` state's) and the 2 batches served next."""
    for name in names:
        built = BUILDERS[name]()
        iterator = iter(built)
        for _ in range(3):
            next(iterator)
        state = (iterator.get_state() if route == "iterator" else built.source.get_state()
                 if route == "source" else leaves_to_json(nnx.state(built).to_pure_dict()))
        following = [values(next(iterator)) for _ in range(2)]
        record = {"builder": name, "route": route, "state": state, "next": following}
        pathlib.Path(folder, f"{prefix}_{name}.json").write_text(json.dumps(record) + "\n")



if __name__ == "__main__":  # imported by its name: the stages digest names the module
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import saved_state_builders as this
    folder, prefix, route, *names = sys.argv[1:]
    this.save_states(folder, prefix, names or sorted(this.BUILDERS), route)
