"""Performance knobs never change values: the same seed serves the same batches (sha256
of every field) and the same state over two epochs whatever the knob. Pinned here: the
pipeline's ``prefetch``, a first filter's two phases against one program (keeping no
record, one, half, all; with the stages on the host and under ``jax.disable_jit()``), the compiled-step store off (``DATARAX_COMPILE_CACHE=0``),
compiling ahead on (``DATARAX_COMPILE_AHEAD=1``; the tests default it off), over a
filter first, stochastic image operators and a text field; and an ArrayRecord source's
``num_threads`` / ``read_ahead`` and the filter's ``on_host`` under the same stages. ``stages_on``,
``decode_processes`` and ``seed=`` vs ``rngs=`` have their own tests
(tests/devices/test_stages_on.py, tests/sources/test_decode_processes.py,
tests/pipeline/test_seed.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np
import pytest

from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
from datarax.operators.image import Cutout, HorizontalFlip, RandomCrop
from datarax.pipeline import Pipeline
from datarax.sources import (ArrayRecordSourceConfig, ArrayRecordSourceModule, ConcatSource,
                             MemorySource, MemorySourceConfig)
from int_record_files import write_records

N = 23
IMAGES = np.random.default_rng(0).integers(0, 256, (N, 6, 6, 3), dtype=np.uint8)


def noisy(el: Any, key: Any) -> Any:
    return el.update_data({"noise": jax.random.randint(key, (), 0, 1000)})


def stages(on_host: bool = False) -> list[Any]:
    return [FilterOperator(predicate=lambda el: el.data["label"] % 3 != 0, on_host=on_host),
            ElementOperator(ElementOperatorConfig(stochastic=True), fn=noisy),
            HorizontalFlip(probability=0.5), RandomCrop(4), Cutout(2)]


def memory_source(kind: str) -> Any:
    """Indexed (the compiled step), or with a text field read as a host source."""
    data = {"image": IMAGES, "label": np.arange(N, dtype=np.int32)}
    if kind == "indexed":
        return MemorySource(MemorySourceConfig(shuffle=True, seed=1), data)
    data["text"] = np.array([f"doc {i}" for i in range(N)])
    return ConcatSource([MemorySource(MemorySourceConfig(shuffle=True, seed=1), data)])


def decode(record: bytes) -> dict[str, np.ndarray]:
    values = np.frombuffer(record, np.uint8)
    return {"label": values[:4].view(np.int32)[0], "image": values[4:].reshape(6, 6, 3)}


def digests(pipeline: Pipeline) -> list[Any]:
    """Each batch's sha256 over two epochs, the epoch and position after each."""
    out: list[Any] = []
    for _ in range(2):
        for batch in pipeline:
            h = hashlib.sha256()
            for key in sorted(batch):
                value = np.asarray(batch[key])
                h.update(f"{key}{value.dtype}{value.shape}".encode())
                h.update(repr(value.tolist()).encode() if value.dtype == object
                         else value.tobytes())
            out.append(h.hexdigest())
        state = pipeline.get_state()
        out.append((state["epoch"], state["position"]))
    return out


MEMORY_KNOBS = {"prefetch=0": ({"prefetch": 0}, {}), "prefetch=5": ({"prefetch": 5}, {}),
                "store off": ({}, {"DATARAX_COMPILE_CACHE": "0"}),
                "compile ahead": ({}, {"DATARAX_COMPILE_AHEAD": "1"})}


REFERENCES: dict[str, list[Any]] = {}


def reference(kind: str) -> list[Any]:
    if kind not in REFERENCES:
        REFERENCES[kind] = digests(Pipeline(source=memory_source(kind), stages=stages(),
                                            batch_size=4, seed=0))
    return REFERENCES[kind]


@pytest.mark.parametrize("kind", ["indexed", "host with text"])
@pytest.mark.parametrize("knob", MEMORY_KNOBS)
def test_a_knob_serves_the_same_batches(knob, kind, monkeypatch):
    expected = reference(kind)
    arguments, env = MEMORY_KNOBS[knob]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pipeline = Pipeline(source=memory_source(kind), stages=stages(), batch_size=4, seed=0,
                        **arguments)
    got = digests(pipeline)
    assert got == expected
    assert len(got) == 2 + 2 * 4  # 15 records kept of 23: 4 batches an epoch


def test_reader_threads_read_ahead_and_a_filter_on_host_serve_the_same_batches(tmp_path):
    path = write_records(tmp_path / "data.array_record",
                         (np.int32([i]).tobytes() + IMAGES[i].tobytes() for i in range(N)),
                         "group_size:3")
    seen = []
    for threads, ahead, on_host in ((1, 1, False), (4, None, True), (3, 7, False)):
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=3, shuffle_files=True),
                                         path, decode=decode, num_threads=threads,
                                         read_ahead=ahead)
        try:
            seen.append(digests(Pipeline(source=source, stages=stages(on_host), batch_size=4,
                                         seed=0, prefetch=threads - 1)))
        finally:
            source.close()
    assert seen[0] == seen[1] == seen[2]
    assert len(seen[0]) == 2 + 2 * 4


# ------------------------------------------------------- a filter first, on every path

KEEPS = {"none": lambda el: el.data["label"] < 0, "one": lambda el: el.data["label"] == 17,
         "half": lambda el: el.data["label"] % 2 == 0, "all": lambda el: el.data["label"] >= 0}


def kept_pipeline(keep: str, **arguments: Any) -> Pipeline:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                          {"image": IMAGES, "label": np.arange(N, dtype=np.int32)})
    return Pipeline(source=source, batch_size=5, seed=0,
                    stages=[FilterOperator(predicate=KEEPS[keep]),
                            ElementOperator(ElementOperatorConfig(stochastic=True), fn=noisy)],
                    **arguments)


@pytest.mark.parametrize("keep, batches", [("none", 0), ("one", 1), ("half", 3), ("all", 5)])
def test_a_first_filter_serves_the_same_batches_on_every_path(keep, batches):
    """The compiled filtered step against the stages on the host and ``jax.disable_jit()``
    (a plain ``jax.jit``), for filters keeping no record, one, half and all."""
    expected = digests(kept_pipeline(keep))
    assert len(expected) == 2 + 2 * batches
    assert digests(kept_pipeline(keep, stages_on="host", prefetch=0)) == expected
    with jax.disable_jit():
        assert digests(kept_pipeline(keep)) == expected
