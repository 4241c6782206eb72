"""Sliding windows over a token stream with ``FlatMapSource``.

Each document (a row of token ids and its length) becomes every window of
``WINDOW + 1`` tokens with stride ``STRIDE`` that fits inside it: a short document
gives none, a long one several. The windows are batched, split into inputs and
targets for next-token prediction, and the run is resumed exactly from a state
saved mid-epoch (the state holds the document and the window within it, not the
windows served so far).

Run: ``python examples/sliding_windows.py``
"""

from __future__ import annotations

import json

import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sources import FlatMapSource, MemorySource, MemorySourceConfig

NUM_DOCS, MAX_LEN, WINDOW, STRIDE, BATCH = 64, 96, 16, 8, 8
MAX_WINDOWS = (MAX_LEN - WINDOW - 1) // STRIDE + 1


def documents() -> MemorySource:
    """Token ids of ``NUM_DOCS`` documents padded to ``MAX_LEN``, with their lengths."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, MAX_LEN + 1, NUM_DOCS).astype(np.int32)
    tokens = rng.integers(1, 1000, (NUM_DOCS, MAX_LEN)).astype(np.int32)
    tokens[np.arange(MAX_LEN) >= lengths[:, None]] = 0  # padding
    return MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                        {"tokens": tokens, "length": lengths})


def windows(doc: dict) -> list[dict]:
    """Every full window of the document's real tokens: inputs and next-token targets."""
    tokens = np.asarray(doc["tokens"])[: int(doc["length"])]
    out = []
    for start in range(0, len(tokens) - WINDOW, STRIDE):
        piece = tokens[start : start + WINDOW + 1]
        out.append({"inputs": piece[:-1], "targets": piece[1:], "start": np.int32(start)})
    return out


def pipeline() -> Pipeline:
    source = FlatMapSource(documents(), windows, max_outputs=MAX_WINDOWS)
    return Pipeline(source=source, stages=[], batch_size=BATCH, rngs=nnx.Rngs(0))


def main() -> None:
    run = pipeline()
    epoch = [batch for batch in run]
    total = sum(int(np.asarray(b["start"]).shape[0]) for b in epoch)
    print(f"documents: {NUM_DOCS} windows in epoch 0: {total} batches: {len(epoch)}")
    first = epoch[0]
    shifted = bool((np.asarray(first["inputs"])[:, 1:] == np.asarray(first["targets"])[:, :-1]).all())
    print(f"batch: inputs {tuple(np.asarray(first['inputs']).shape)} targets shifted by one: {shifted}")

    # Save mid-epoch, then resume in a freshly built pipeline.
    interrupted = pipeline()
    iterator = iter(interrupted)
    for _ in range(5):
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    print(f"saved after 5 batches, source cursor [document position, window]: {state['source']['cursor']}")
    resumed = pipeline()
    continued = iter(resumed)
    continued.set_state(state)
    rest = [batch for batch in continued]
    same = len(rest) == len(epoch) - 5 and all(
        all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
        for a, b in zip(epoch[5:], rest)
    )
    print(f"resumed batches identical: {same}")


if __name__ == "__main__":
    main()
