"""Compiled steps stored on disk: a new step (as in a fresh process) loads the stored
executable; stale, corrupt or unfingerprintable entries fall back with identical
results; the fingerprint separates programs that differ anywhere the step reads."""

import collections
import json
import logging
import subprocess
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline, program_cache, steps
from datarax.pipeline.fingerprint import Unfingerprintable, fingerprint
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig


def scale(element, key=None):
    return element.update_data({"y": element.data["x"].astype(jnp.float32) / 4})


def jitter(element, key):
    return element.update_data({"noise": jax.random.uniform(key)})


def make(stages=None, n=23, batch_size=5, seed=3, shuffle=False):
    source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed), {"x": np.arange(n, dtype=np.int32)})
    if stages is None:
        stages = [
            ElementOperator(ElementOperatorConfig(), fn=scale),
            ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter),
        ]
    return Pipeline(source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(0))


def epoch(pipeline):
    return [{k: np.asarray(v) for k, v in b.items()} for b in pipeline]


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for field in x:
            np.testing.assert_array_equal(x[field], y[field])


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty program cache, and no compiled steps in this process: each test's
    steps are new, as in a fresh process."""
    directory = tmp_path / "programs"
    monkeypatch.setenv("DATARAX_PROGRAM_CACHE_DIR", str(directory))
    monkeypatch.delenv("DATARAX_PROGRAM_CACHE", raising=False)
    monkeypatch.setattr(steps, "_CACHE", collections.OrderedDict())
    monkeypatch.setattr(program_cache, "_COUNTS", collections.Counter())
    return directory


def fresh_process(monkeypatch):
    monkeypatch.setattr(steps, "_CACHE", collections.OrderedDict())


def test_a_new_step_loads_the_stored_executable_and_serves_the_same_batches(store, monkeypatch, caplog):
    first = epoch(make())
    # the full batches' step and the short last batch's: per-record stages run padded
    assert program_cache.counts() == {"missing": 1, "stored": 1}
    assert len(list(store.glob("*.xla"))) == 1

    fresh_process(monkeypatch)
    with caplog.at_level(logging.INFO, logger="datarax.program_cache"):
        pipeline = make()
        second = epoch(pipeline)
    same(first, second)
    assert program_cache.counts() == {"missing": 1, "stored": 1, "loaded": 1}
    assert [r.getMessage().split(" from ")[0] for r in caplog.records] == ["loaded compiled step"]
    assert pipeline.stats()["seconds"]["compile"] > 0  # the load is start-up time


def test_resume_from_a_loaded_step_continues_exactly(store, monkeypatch):
    reference = epoch(make())
    fresh_process(monkeypatch)
    pipeline = make()
    iterator = iter(pipeline)
    head = [{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(2)]
    state = json.loads(json.dumps(iterator.get_state()))
    fresh_process(monkeypatch)
    restored = make()
    restored.set_state(state)
    same(reference, head + epoch(restored))
    assert program_cache.counts()["loaded"] == 2


@pytest.mark.parametrize(
    "damage",
    ["truncated", "flipped byte", "older format", "another key", "empty"],
)
def test_a_stale_or_corrupt_entry_is_ignored_and_replaced(store, monkeypatch, caplog, damage):
    first = epoch(make())
    (path,) = store.glob("*.xla")
    raw = path.read_bytes()
    header_end = raw.index(b"\n", raw.index(b"\n") + 1) + 1
    if damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "flipped byte":
        raw = raw[:-100] + bytes([raw[-100] ^ 0xFF]) + raw[-99:]
    elif damage == "older format":
        raw = raw.replace(b"datarax-program-v1", b"datarax-program-v0", 1)
    elif damage == "another key":
        raw = raw[:len(b"datarax-program-v1\n")] + b"0" * 64 + raw[len(b"datarax-program-v1\n") + 64:]
    else:
        raw = b""
    assert header_end > 0
    path.write_bytes(raw)

    fresh_process(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="datarax.program_cache"):
        second = epoch(make())
    same(first, second)
    assert program_cache.counts() == {"missing": 1, "stored": 2, "rejected": 1}
    (warning,) = caplog.records
    assert warning.getMessage().startswith(f"ignoring stored step {path}: ")
    assert warning.getMessage().endswith("; compiling it again")

    fresh_process(monkeypatch)  # the entry was written again, and loads
    same(first, epoch(make()))
    assert program_cache.counts()["loaded"] == 1


def test_an_entry_that_loads_but_fails_to_run_is_replaced(store, monkeypatch, caplog):
    first = epoch(make())
    fresh_process(monkeypatch)

    from jax.experimental import serialize_executable

    real, calls = serialize_executable.deserialize_and_load, []

    def broken(*loaded, **where):  # the load from disk; the store's check loads for real
        calls.append(1)
        if len(calls) > 1:
            return real(*loaded, **where)

        def run(*args):
            raise RuntimeError("NOT_FOUND: Function fusion not found")

        return run

    # (patched in jax, not in datarax: code patched into datarax is part of the key)
    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, "datarax.program_cache"):
        patch.setattr(serialize_executable, "deserialize_and_load", broken)
        same(first, epoch(make()))
    assert program_cache.counts() == {"missing": 1, "stored": 2, "rejected": 1}
    (warning,) = caplog.records
    assert warning.getMessage().endswith(
        "failed to run (NOT_FOUND: Function fusion not found); compiling it again"
    )
    fresh_process(monkeypatch)
    same(first, epoch(make()))
    assert program_cache.counts()["loaded"] == 1


def test_steps_that_differ_only_in_a_closed_over_value_get_their_own_entries(store, monkeypatch):
    def build(factor):
        def times(element, key=None):
            return element.update_data({"y": element.data["x"] * factor})

        return make([ElementOperator(ElementOperatorConfig(), fn=times)])

    twice, thrice = epoch(build(2)), epoch(build(3))
    assert len(list(store.glob("*.xla"))) == 2
    fresh_process(monkeypatch)
    for factor, expected in ((3, thrice), (2, twice)):
        got = epoch(build(factor))
        same(expected, got)
        assert all((b["y"] == b["x"] * factor).all() for b in got)
    assert program_cache.counts()["loaded"] == 2


def test_a_changed_config_or_batch_size_is_another_program(store, monkeypatch):
    epoch(make(seed=3))
    epoch(make(seed=4))
    epoch(make(batch_size=4))
    assert program_cache.counts() == {"missing": 3, "stored": 3}
    fresh_process(monkeypatch)
    shuffled = epoch(make(seed=4, shuffle=True))  # shuffled at load as when stored
    assert [int(v) for b in shuffled for v in b["x"]] != list(range(23))
    fresh_process(monkeypatch)
    same(shuffled, epoch(make(seed=4, shuffle=True)))
    assert program_cache.counts() == {"missing": 4, "stored": 4, "loaded": 1}


def test_a_stage_over_mutable_state_runs_uncached(store, caplog):
    seen = []

    def record(element, key=None):
        seen.append(1)  # traced once; a stored step would never trace it
        return element

    with caplog.at_level(logging.INFO, logger="datarax.program_cache"):
        batches = epoch(make([ElementOperator(ElementOperatorConfig(), fn=record)]))
    assert sorted(int(v) for b in batches for v in b["x"]) == list(range(23))
    assert program_cache.counts() == {"unfingerprintable": 1}
    assert list(store.glob("*.xla")) == [] and len(seen) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "step not cached on disk: it depends on mutable state: "
        "test_a_stage_over_mutable_state_runs_uncached.<locals>.record reads 'seen', a list"
    ]


def test_without_the_persistent_cache_bytes_it_compiles_afresh_and_stores(store, monkeypatch):
    # An executable loaded from JAX's persistent cache and serialized again may not
    # load (XLA:CPU); the round-trip check then compiles with that cache bypassed.
    monkeypatch.setattr(
        program_cache, "_compile_capturing_cached_bytes",
        lambda jitted, args: (jitted.lower(*args).compile(), None),
    )
    first = epoch(make())
    assert program_cache.counts() == {"missing": 1, "stored": 1}
    fresh_process(monkeypatch)
    same(first, epoch(make()))
    assert program_cache.counts()["loaded"] == 1


def test_a_step_that_calls_back_into_python_is_not_stored(store, capfd):
    def shout(element, key=None):
        jax.debug.print("x={x}", x=element.data["x"])
        return element

    batches = epoch(make([ElementOperator(ElementOperatorConfig(), fn=shout)], n=4, batch_size=4))
    assert [b["x"].tolist() for b in batches] == [[0, 1, 2, 3]]
    assert program_cache.counts() == {"missing": 1, "not_stored": 1}
    assert list(store.glob("*.xla")) == []
    assert sorted(capfd.readouterr().out.split()) == ["x=0", "x=1", "x=2", "x=3"]


def test_switched_off_it_stores_nothing(store, monkeypatch):
    monkeypatch.setenv("DATARAX_PROGRAM_CACHE", "0")
    epoch(make())
    assert program_cache.counts() == {} and not store.exists()


def test_host_source_stages_are_stored_and_loaded(store, monkeypatch, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(11, dtype=np.int32))

    def build():
        source = NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy"), field="x"))
        stages = [ElementOperator(ElementOperatorConfig(), fn=scale)]
        return Pipeline(source=source, stages=stages, batch_size=4, rngs=nnx.Rngs(0))

    first = epoch(build())
    # full batches and the short last one: two argument signatures, two entries
    assert program_cache.counts() == {"missing": 2, "stored": 2}
    fresh_process(monkeypatch)
    second = epoch(build())
    same(first, second)
    assert [b["y"].tolist() for b in second][-1] == [2.0, 2.25, 2.5]
    assert program_cache.counts()["loaded"] == 2


@pytest.mark.slow
def test_a_second_process_loads_the_step_the_first_stored(tmp_path):
    script = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        from flax import nnx
        from datarax.operators import ElementOperator, ElementOperatorConfig
        from datarax.pipeline import Pipeline, program_cache
        from datarax.sources import MemorySource, MemorySourceConfig
        sys.path.insert(0, sys.argv[1])
        from stage_fns import jitter
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"x": np.arange(50, dtype=np.int32)})
        stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)]
        pipeline = Pipeline(source=source, stages=stages, batch_size=8, rngs=nnx.Rngs(0))
        noise = [np.asarray(b["noise"]).tolist() for b in pipeline]
        print(json.dumps({"counts": program_cache.counts(), "noise": noise}))
        """
    )
    (tmp_path / "stage_fns.py").write_text(
        "import jax\n\n\ndef jitter(element, key):\n"
        "    return element.update_data({'noise': jax.random.uniform(key)})\n"
    )
    env = {"DATARAX_PROGRAM_CACHE_DIR": str(tmp_path / "programs"), "JAX_PLATFORMS": "cpu",
           "PATH": "/usr/bin:/bin"}
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)], env={**env, **_pythonpath()},
            capture_output=True, text=True, check=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["counts"] == {"missing": 1, "stored": 1}
    assert runs[1]["counts"] == {"loaded": 1}
    assert runs[0]["noise"] == runs[1]["noise"] and len(runs[0]["noise"]) == 7


def _pythonpath():
    return {"PYTHONPATH": ":".join(p for p in sys.path if p)}


# ------------------------------------------------------------------ fingerprint
def test_the_fingerprint_follows_code_defaults_closures_and_globals():
    module = types.ModuleType("user_lib")
    module.SCALE = 2.0
    exec("def f(x, k=1):\n    return x * SCALE + k\n", module.__dict__)
    before = fingerprint(module.f)
    module.SCALE = 3.0
    assert fingerprint(module.f) != before  # a global it reads
    module.SCALE = 2.0
    assert fingerprint(module.f) == before
    module.f.__defaults__ = (2,)
    assert fingerprint(module.f) != before  # a default
    exec("def f(x, k=1):\n    return x * SCALE - k\n", module.__dict__)
    assert fingerprint(module.f) != before  # the code


def test_the_fingerprint_follows_what_code_reads_from_a_user_module():
    lib = types.ModuleType("user_helpers")
    lib.OFFSET = 1
    caller = types.ModuleType("user_caller")
    caller.lib = lib
    exec("def g(x):\n    return x + lib.OFFSET\n", caller.__dict__)
    exec("def h(x):\n    return lib.OTHER\n", caller.__dict__)
    lib.OTHER = 0
    before = fingerprint((caller.h, caller.g))  # lib seen first for h, then for g
    lib.OFFSET = 5
    assert fingerprint((caller.h, caller.g)) != before


def test_mutable_and_unknown_state_cannot_be_fingerprinted():
    table = {"a": 1}

    def reads_dict(x):
        return x * table["a"]

    class Counter:
        def __init__(self):
            self.n = 0

    counter = Counter()

    def reads_object(x):
        return x + counter.n

    for fn, what in ((reads_dict, "'table', a dict"), (reads_object, "'counter', a Counter")):
        with pytest.raises(Unfingerprintable, match=what):
            fingerprint(fn)
    with pytest.raises(Unfingerprintable, match="threading.local|_thread._local"):
        import threading

        fingerprint(threading.local())


def test_the_fingerprint_of_recursive_code_and_library_functions_is_stable():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    assert fingerprint(fact) == fingerprint(fact)
    assert fingerprint(jnp.sin) != fingerprint(jnp.cos)
    assert fingerprint((np.float32(1), np.dtype("int8"))) != fingerprint((np.float32(2), np.dtype("int8")))


def test_datarax_code_patched_at_run_time_is_another_program(store, monkeypatch):
    from datarax.core import keys

    plain = epoch(make())
    real = keys.record_keys

    def shifted(base_key, epoch_, indices):
        return real(base_key, epoch_ + 1, indices)

    monkeypatch.setattr(keys, "record_keys", shifted)
    monkeypatch.setattr(steps, "record_keys", shifted)
    fresh_process(monkeypatch)
    patched = epoch(make())
    assert program_cache.counts() == {"missing": 2, "stored": 2}
    assert [b["noise"].tolist() for b in patched] != [b["noise"].tolist() for b in plain]
