"""``Pipeline(..., seed=s)``: an int instead of ``rngs=nnx.Rngs(s)``, same batches."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, StateError
from datarax.mixing import MixSource
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import (ArrayRecordSourceConfig, ArrayRecordSourceModule, MemorySource,
                             MemorySourceConfig)


def _noisy(el, key):
    return el.update_data({"x": el.data["x"] + jax.random.uniform(key)})


def _pipeline(**seeding):
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                          {"x": np.arange(10, dtype=np.float32)})
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noisy)]
    return Pipeline(source=source, stages=stages, batch_size=4, **seeding)


def _epochs(pipeline, count=2):
    return [np.asarray(b["x"]).tobytes() for _ in range(count) for b in pipeline]


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 - 1])
def test_a_seed_serves_the_batches_of_rngs_of_that_seed(seed):
    assert _epochs(_pipeline(seed=seed)) == _epochs(_pipeline(rngs=nnx.Rngs(seed)))


def test_other_seeds_other_batches_and_a_seeded_state_restores():
    assert _epochs(_pipeline(seed=1)) != _epochs(_pipeline(seed=2))
    pipeline = _pipeline(seed=3)
    state = pipeline.get_state()
    other = _pipeline(rngs=nnx.Rngs(3))
    other.set_state(state)  # the same key: a state of one restores into the other
    assert _epochs(other, 1) == _epochs(pipeline, 1)


def test_a_seed_warns_about_nothing(recwarn):
    _pipeline(seed=0)
    assert [str(w.message) for w in recwarn if "rngs" in str(w.message)] == []


_WIDER = "It seeds 32-bit keys: give one in that range (seed % 2**32 for a wider one)."
_AN_INT = "Give an int in [0, 2**32), e.g. seed=0."
_A_KEY = "A JAX key goes in rngs=nnx.Rngs(key) instead of seed=."


@pytest.mark.parametrize("seed, message", [
    (-1, f"Pipeline seed must be in [0, 2**32), got -1. {_WIDER}"),
    (np.int64(-1), f"Pipeline seed must be in [0, 2**32), got -1. {_WIDER}"),
    (2**32, f"Pipeline seed must be in [0, 2**32), got 4294967296. {_WIDER}"),
    (1.5, f"Pipeline seed must be an int, got float 1.5. {_AN_INT}"),
    (True, f"Pipeline seed must be an int, got bool True. {_AN_INT}"),
    ("0", f"Pipeline seed must be an int, got str '0'. {_AN_INT}"),
    (np.array(3), "Pipeline seed must be an int, got ndarray array(3). Pass int(seed), a "
                  "Python int in [0, 2**32)."),
    (jax.random.key(0), "Pipeline seed must be an int, got PRNGKeyArray Array((), "
                        f"dtype=key<fry>) overlaying: [0 0]. {_A_KEY}"),
    (np.zeros(2, np.uint32), "Pipeline seed must be an int, got ndarray array([0, 0], "
                             f"dtype=uint32). {_A_KEY}"),
    (np.ones(2, np.float32), "Pipeline seed must be an int, got ndarray array([1., 1.], "
                             f"dtype=float32). {_AN_INT}"),  # two numbers, not a key's data
])
def test_a_bad_seed_is_refused_saying_what_to_pass(seed, message):
    with pytest.raises(ConfigError) as caught:
        _pipeline(seed=seed)
    assert str(caught.value) == message


def test_a_numpy_int_seed_is_that_int():
    assert _epochs(_pipeline(seed=np.int64(7)), 1) == _epochs(_pipeline(seed=7), 1)


def test_rngs_and_seed_together_are_refused():
    with pytest.raises(ConfigError, match="Pipeline got both rngs= and seed=; give one"):
        _pipeline(seed=0, rngs=nnx.Rngs(0))


def test_a_restore_at_every_batch_boundary_continues_with_the_same_values():
    reference = _epochs(_pipeline(seed=2))  # 2 epochs of 3 batches
    for handed in range(len(reference) + 1):
        saved = _pipeline(seed=2)
        head: list[bytes] = []
        while len(head) < handed:  # pass by pass, stopping after `handed` batches
            for batch in saved:
                head.append(np.asarray(batch["x"]).tobytes())
                if len(head) == handed:
                    break
        resumed = _pipeline(seed=2)
        resumed.set_state(saved.get_state())
        tail = []
        while len(head) + len(tail) < len(reference):
            tail += _epochs(resumed, 1)
        assert head + tail == reference, f"restored after {handed} batches"


def test_a_state_of_a_pipeline_without_stochastic_stages_names_the_stages_not_a_version():
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=4),
                          {"x": np.arange(10, dtype=np.float32)})
    plain = Pipeline(source=source, stages=[], batch_size=4).get_state()
    assert "draw" not in plain["settings"]
    with pytest.raises(StateError, match=r"saved with stages='[0-9a-f]+' but this pipeline "
                                         r"has stages=") as caught:
        _pipeline(seed=0).set_state(plain)
    assert caught.value.field == "stages"
    earlier = _pipeline(seed=0).get_state()  # the same stochastic stages, no "draw": version 1
    del earlier["settings"]["draw"]
    with pytest.raises(StateError, match="saved with random draw version 1, but this datarax "
                                         "draws with version 2") as caught:
        _pipeline(seed=0).set_state(earlier)
    assert caught.value.field == "draw"


def _mixture(seed: int) -> MixSource:
    parts = {"a": MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                               {"x": np.arange(12, dtype=np.float32)}),
             "b": MemorySource(MemorySourceConfig(shuffle=True, seed=seed + 1),
                               {"x": np.arange(100, 105, dtype=np.float32)})}
    return MixSource(parts, {"a": 0.7, "b": 0.3}, seed=seed)


def _files(folder, seed: int):
    pytest.importorskip("array_record")
    from int_record_files import write_records

    paths = [write_records(folder / f"part-{k}.array_record",
                           (np.float32([k * 10 + i]).tobytes() for i in range(7)))
             for k in range(2)]
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=seed),
                                   paths, decode=lambda r: {"x": np.frombuffer(r, np.float32)})


@pytest.mark.parametrize("kind", ["memory", "array_record", "mixture"])
def test_the_pipeline_seed_picks_the_values_and_the_source_seed_the_order(kind, tmp_path):
    def served(seed: int, source_seed: int) -> tuple[list[bytes], list[list[int]]]:
        if kind == "memory":
            source = MemorySource(MemorySourceConfig(shuffle=True, seed=source_seed),
                                  {"x": np.arange(10, dtype=np.float32)})
        elif kind == "mixture":
            source = _mixture(source_seed)
        else:
            source = _files(tmp_path, source_seed)
        stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=_noisy)]
        pipeline = Pipeline(source=source, stages=stages, batch_size=4, seed=seed)
        try:
            batches = [np.asarray(b["x"]).ravel() for _ in range(2) for b in pipeline]
        finally:
            source.close()
        return [b.tobytes() for b in batches], [np.floor(b).astype(int).tolist() for b in batches]

    values, order = served(0, 5)
    assert served(0, 5) == (values, order)  # a fresh pipeline of the same seeds
    other_values, same_order = served(1, 5)
    assert same_order == order and other_values != values
    assert served(0, 6)[1] != order


def _add_draw(el, key):
    return {"x": el.data["x"] + jax.random.randint(key, (), 0, 1000)}


def _drawn(stages, seed=0) -> np.ndarray:
    source = MemorySource(MemorySourceConfig(), {"x": np.zeros(8, np.int32)})
    return np.concatenate([np.asarray(b["x"]) for b in
                           Pipeline(source=source, stages=stages, batch_size=4, seed=seed)])


def test_one_stage_object_twice_draws_alike_with_its_own_rngs_else_apart():
    own = ElementOperator(fn=_add_draw, stochastic=True, rngs=nnx.Rngs(3))
    once = _drawn([own])
    assert _drawn([own, own]).tolist() == (2 * once).tolist()
    assert _drawn([own], seed=1).tolist() == once.tolist()  # its key, not the pipeline's
    shared = ElementOperator(fn=_add_draw, stochastic=True)
    first = _drawn([shared])
    assert _drawn([shared, shared]).tolist() != (2 * first).tolist()  # positions 0 and 1
    fresh = [ElementOperator(fn=_add_draw, stochastic=True) for _ in range(2)]
    assert _drawn([shared, shared]).tolist() == _drawn(fresh).tolist()
    assert _drawn([shared], seed=1).tolist() == _drawn([fresh[0]], seed=1).tolist()
