"""Three datasets mixed 0.5 / 0.3 / 0.2, interrupted mid-epoch and resumed exactly.

``MixSource`` interleaves its sources by a deterministic schedule from the seed: each
source's records are visited once per that source's own epoch (no sampling with
replacement), the realised proportions follow the weights in every window, and the
state is the mixture's position (plus, for a stream, where its pass began) — so a
resume is a seek. The sources are of different kinds: two in memory and a forward-only
stream.
"""

import json

import jax
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.mixing import MixSource
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, StreamSource


class Captions(StreamSource):
    """A forward-only stream of ``n`` records (ids from 2000), one pass per epoch."""

    def __init__(self, n: int) -> None:
        super().__init__(StructuralConfig())
        self.n, self.next_id = n, 0

    def restart(self, epoch: int) -> None:
        self.next_id = 0

    def get_batch(self, batch_size: int):
        if self.next_id >= self.n:
            return None
        ids = np.arange(self.next_id, min(self.n, self.next_id + batch_size), dtype=np.int32)
        self.next_id += len(ids)
        return {"id": ids + 2000}

    def element_spec(self):
        return {"id": jax.ShapeDtypeStruct((), np.int32)}


def build() -> Pipeline:
    web = MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"id": np.arange(0, 500, dtype=np.int32)})
    books = MemorySource(MemorySourceConfig(shuffle=True, seed=2), {"id": np.arange(1000, 1120, dtype=np.int32)})
    mix = MixSource(
        {"web": web, "books": books, "captions": Captions(90)},
        weights={"web": 0.5, "books": 0.3, "captions": 0.2},
        seed=0,
        records_per_epoch=1000,
    )
    return Pipeline(source=mix, stages=[], batch_size=50, rngs=nnx.Rngs(0))


def ids(batches) -> list[int]:
    return [int(i) for b in batches for i in np.asarray(b["id"])]


if __name__ == "__main__":
    reference = ids(build())
    shares = np.bincount(np.searchsorted([1000, 2000], reference, side="right"), minlength=3) / len(reference)
    print("realised shares web/books/captions:", shares.round(3).tolist())

    pipeline = build()
    iterator = iter(pipeline)
    head = ids(next(iterator) for _ in range(7))
    state = json.loads(json.dumps(pipeline.get_state()))  # e.g. written next to a checkpoint
    print("saved at record", state["position"], "source position:", state["source"])
    print("restore refuses other mixture settings, e.g. weights",
          state["settings"]["source.weights"])

    resumed = build()  # a new process: rebuild, restore, continue
    resumed.set_state(state)
    rest = ids(resumed)
    print("resumed run matches the uninterrupted run:", head + rest == reference)
    assert head + rest == reference
