"""datarax's store of its own compiled steps (``datarax.core.compiled_store``).

A fresh process loads what an earlier one compiled for the same program and serves the
same batches; an edited stage is a different program; the store refuses a folder others
may write, writes nothing when turned off, keeps to its size cap, and compiles again
over a corrupt entry. In this process the tests run with JAX's persistent cache off (a
user's default), but for the one about JAX's cache serving a step.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import textwrap
import threading
from pathlib import Path

import jax
import numpy as np
import pytest
from forked_runs import ForkedRuns
from waiting import eventually

from datarax.core import compiled_store

SRC = Path(__file__).resolve().parents[2] / "src"

EPOCH = """
    import json, sys
    import numpy as np
    from flax import nnx
    from datarax.core.compiled_store import counts
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    def epoch(scale):
        def fn(el, key=None):
            return el.update_data({"x": el.data["x"] * scale})

        before = counts()
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                              {"x": np.arange(20, dtype=np.float32)})
        pipeline = Pipeline(source=source, batch_size=8, rngs=nnx.Rngs(0),
                            stages=[ElementOperator(ElementOperatorConfig(), fn=fn)])
        batches = [np.asarray(b["x"]).tolist() for b in pipeline]
        return {"batches": batches, "counts": {k: v - before[k] for k, v in counts().items()}}

    # One epoch per scale, in order; each epoch's counts are its own.
    print(json.dumps([epoch(float(scale)) for scale in sys.argv[1:]]))
"""


# Each epoch run is a new process forked from one that did these imports and nothing else
# (nothing compiled, nothing loaded): one interpreter start-up and import for both.
EPOCH_IMPORTS = """
import numpy as np
from flax import nnx
from datarax.core.compiled_store import counts
from datarax.operators import ElementOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource
"""


@pytest.fixture
def epochs(tmp_path):
    """``epochs(*scales)``: one epoch per scale, in a new process, on the store in
    ``tmp_path / "compiled"``; each epoch's batches and counts."""
    environ = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    environ.update({"DATARAX_COMPILE_CACHE_DIR": str(tmp_path / "compiled"),
                    "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(SRC)})
    script = tmp_path / "epoch.py"
    script.write_text(textwrap.dedent(EPOCH))
    with ForkedRuns(EPOCH_IMPORTS, tmp_path, environ) as runs:
        def run(*scales: float) -> list[dict]:
            name = "-".join(map(str, scales))
            out, err = tmp_path / f"epoch{name}.out", tmp_path / f"epoch{name}.err"
            code = runs.wait(runs.start(script, [*map(str, scales)], out, err))
            assert code == 0, err.read_text()[-3000:]
            return json.loads(out.read_text().strip().splitlines()[-1])

        yield run


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.exe")) if folder.exists() else []


def test_a_second_process_loads_the_steps_and_an_edited_stage_is_compiled_afresh(
        tmp_path, epochs):
    folder = tmp_path / "compiled"
    (first,) = epochs(2.0)
    assert first["counts"]["loaded"] == 0 and first["counts"]["compiled"] >= 1
    assert first["counts"]["stored"] == first["counts"]["compiled"]
    stored = _entries(folder)
    assert len(stored) == first["counts"]["stored"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    # A second process: the same stage, then an edited one (one process, so fewer start-ups).
    second, edited = epochs(2.0, 3.0)
    assert second["counts"]["compiled"] == 0
    assert second["counts"]["loaded"] == first["counts"]["compiled"]
    assert second["batches"] == first["batches"]
    assert sorted(x for b in second["batches"] for x in b) == [2.0 * i for i in range(20)]
    assert second["counts"]["stored"] == 0  # nothing new written by the same stage
    # The scale is read while tracing: an edited stage is another program, nothing loaded.
    assert edited["counts"]["loaded"] == 0 and edited["counts"]["compiled"] >= 1
    assert sorted(x for b in edited["batches"] for x in b) == [3.0 * i for i in range(20)]
    assert edited["counts"]["stored"] == edited["counts"]["compiled"]
    entries = _entries(folder)  # the first process's entries kept, the edited stage's added
    assert set(stored) <= set(entries)
    assert len(entries) == first["counts"]["stored"] + edited["counts"]["stored"]


# Threads an earlier test's pipeline may leave compiling a step for a moment (a worker
# preparing batches ahead, a first pass compiled ahead): its compile would count in this
# process's totals, which the tests here compare exactly, and go to this test's folder.
_COMPILING = ("datarax-dispatch", "datarax-compile-ahead")
_STAYING: set[threading.Thread] = set()  # waited for once in vain: not waited for again


def _settle_compiling_threads() -> None:
    """Wait (up to ``eventually``'s limit) for other tests' compiling threads to end."""
    gc.collect()  # an iterator dropped in a reference cycle releases its worker now

    def others() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.name in _COMPILING and t.is_alive() and t not in _STAYING]

    if not eventually(lambda: not others()):
        _STAYING.update(others())


@contextlib.contextmanager
def _jax_persistent_cache(folder: Path | None):
    """JAX's persistent compilation cache in ``folder`` (every program kept), or off; the
    test run's again after."""
    from jax.experimental.compilation_cache import compilation_cache

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    old = [getattr(jax.config, name) for name in names]
    jax.config.update(names[0], None if folder is None else str(folder))
    jax.config.update(names[1], 0.0)
    compilation_cache.reset_cache()  # JAX reads its folder once: read it again
    try:
        yield
    finally:
        for name, value in zip(names, old):
            jax.config.update(name, value)
        compilation_cache.reset_cache()


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The store in a fresh folder of ``tmp_path`` for this test (no other test's
    thread compiling meanwhile), JAX's persistent cache off: the run's (shared by the
    xdist workers) would serve a program another test compiled, and that is not stored."""
    _settle_compiling_threads()
    folder = tmp_path / "compiled"
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(folder))
    monkeypatch.delenv("DATARAX_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("DATARAX_COMPILE_CACHE_BYTES", raising=False)
    with _jax_persistent_cache(None):
        yield folder


def _delta(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in compiled_store.counts().items()}


def _affine(x, a):  # one program per (shape, dtype) of x: a test that loads uses its own
    return x * a + 1


def test_a_relative_xdg_cache_home_is_ignored_as_the_shard_cache_ignores_it(
        monkeypatch, tmp_path):
    monkeypatch.delenv("DATARAX_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("DATARAX_COMPILE_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    assert compiled_store.cache_dir() == tmp_path / ".cache" / "datarax" / "compiled"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiled_store.cache_dir() == tmp_path / "xdg" / "datarax" / "compiled"


def test_turned_off_it_writes_nothing(store, monkeypatch):
    from flax import nnx

    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    monkeypatch.setenv("DATARAX_COMPILE_CACHE", "0")
    before = compiled_store.counts()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"x": np.arange(20, dtype=np.float32)})
    pipeline = Pipeline(source=source, batch_size=8, rngs=nnx.Rngs(0),
                        stages=[ElementOperator(ElementOperatorConfig(),
                                                fn=lambda el, key=None: el.update_data(
                                                    {"x": el.data["x"] * 5.0}))])
    batches = [np.asarray(b["x"]).tolist() for b in pipeline]
    assert sorted(x for b in batches for x in b) == [5.0 * i for i in range(20)]
    delta = _delta(before)
    assert delta["compiled"] >= 1 and delta["stored"] == 0 and delta["loaded"] == 0
    assert not store.exists()


def test_a_folder_others_may_write_is_refused_with_a_warning(store):
    store.mkdir(mode=0o700)
    os.chmod(store, 0o777)
    before = compiled_store.counts()
    step = compiled_store.stored_jit(_affine)
    with pytest.warns(RuntimeWarning, match=r"group or others may write it \(mode 777\).*chmod 700"):
        out = step(np.arange(4, dtype=np.float32), np.float32(2))
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0]
    assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 0, "corrupt": 0}
    assert _entries(store) == []


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="giving a folder to another user needs root")
def test_a_folder_of_another_user_is_refused_with_a_warning(store):
    store.mkdir(mode=0o700)
    os.chown(store, 65534, -1)
    step = compiled_store.stored_jit(_affine)
    with pytest.warns(RuntimeWarning, match="it belongs to user id 65534, not to this user"):
        assert step(np.arange(2, dtype=np.float32), np.float32(2)).tolist() == [1.0, 3.0]
    assert _entries(store) == []


def test_a_corrupt_entry_is_compiled_again_and_replaced(store):
    x, a = np.arange(5, dtype=np.float32), np.float32(3)
    compiled_store.stored_jit(_affine)(x, a)
    (entry,) = store.glob("*.exe")
    good = entry.read_bytes()
    header = b"datarax-compiled-1\n"
    checked_garbage = header + hashlib.sha256(b"garbage").digest() + b"garbage"
    for bad in (good[: len(good) // 2], good[:-10] + b"0123456789", b"not an executable",
                checked_garbage):
        entry.write_bytes(bad)
        before = compiled_store.counts()
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == (x * 3 + 1).tolist()
        assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 1, "corrupt": 1}
        assert [p.name for p in store.glob("*.exe")] == [entry.name]
    before = compiled_store.counts()
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == (x * 3 + 1).tolist()
    assert _delta(before) == {"compiled": 0, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 0}


def test_an_entry_loaded_once_is_served_again_without_loading_until_its_bytes_change(store):
    """A second step of the same program in one process (a second pipeline, a notebook
    cell run again) is served the executable the first load gave; an entry whose bytes
    changed on disk is loaded afresh."""
    x, a = np.arange(6, dtype=np.float32), np.float32(4)
    want = (x * 4 + 1).tolist()
    compiled_store.stored_jit(_affine)(x, a)  # compiled and stored
    before = compiled_store.counts()
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
    assert _delta(before) == {"compiled": 0, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 0}
    before = compiled_store.counts()
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
    assert _delta(before) == {"compiled": 0, "loaded": 0, "reused": 2, "stored": 0, "corrupt": 0}
    (entry,) = store.glob("*.exe")
    entry.write_bytes(b"replaced by another process")
    before = compiled_store.counts()
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
    assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 1, "corrupt": 1}


def test_an_entry_is_loaded_onto_the_device_its_program_runs_on(store, monkeypatch):
    """A step whose arguments are committed to a device (``stages_on="host"``: the CPU,
    beside a TPU's default backend) is loaded onto that device's client: the default
    backend's cannot parse another platform's executable (seen on a TPU v5e)."""
    cpu = jax.local_devices(backend="cpu")[0]
    x, a = jax.device_put(np.arange(11, dtype=np.float32), cpu), np.float32(3)
    compiled_store.stored_jit(_affine)(x, a)
    loads, load = [], compiled_store.serialize_executable.deserialize_and_load

    def noted(*args, **kwargs):
        loads.append((kwargs.get("backend"), kwargs.get("execution_devices")))
        return load(*args, **kwargs)

    monkeypatch.setattr(compiled_store.serialize_executable, "deserialize_and_load", noted)
    before = compiled_store.counts()
    out = compiled_store.stored_jit(_affine)(x, a)
    assert out.tolist() == (np.arange(11) * 3 + 1).tolist() and out.devices() == {cpu}
    assert _delta(before) == {"compiled": 0, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 0}
    assert loads == [(cpu.client, [cpu])]


def test_an_entry_that_loads_but_cannot_run_is_compiled_again_and_removed(store, monkeypatch):
    """XLA's CPU runtime was seen to load an entry that then misses a kernel at its first
    call; the call is served by a fresh compile and the entry goes."""
    x, a = np.arange(3, dtype=np.float32), np.float32(2)
    compiled_store.stored_jit(_affine)(x, a)
    (entry,) = store.glob("*.exe")

    def missing_kernel(*args):
        raise jax.errors.JaxRuntimeError("NOT_FOUND: Function gather_fusion not found")

    monkeypatch.setattr(compiled_store.serialize_executable, "deserialize_and_load",
                        lambda *args, **kwargs: missing_kernel)
    before = compiled_store.counts()
    step = compiled_store.stored_jit(_affine)
    assert step(x, a).tolist() == [1.0, 3.0, 5.0]
    assert step(x, a).tolist() == [1.0, 3.0, 5.0]
    assert _delta(before) == {"compiled": 1, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 1}
    assert not entry.exists()


class _FailsWhenRead:
    """An output whose computation failed on the runtime's thread: as a jax.Array of a
    failed asynchronous run, its error rises when waited on or read."""

    def block_until_ready(self):
        raise jax.errors.JaxRuntimeError("NOT_FOUND: Function select_subtract_fusion not found")

    tolist = __array__ = block_until_ready


def test_an_entry_whose_first_run_fails_asynchronously_is_compiled_again_and_removed(
        store, monkeypatch):
    """XLA runs a call asynchronously: a loaded entry missing a kernel can return outputs
    whose error rises only when read (seen at a filtered step's ``int(kept)``). The first
    call waits for its outputs, so the failure is met inside the retry, never by the user."""
    x, a = np.arange(8, dtype=np.float32), np.float32(2)
    want = (x * 2 + 1).tolist()
    compiled_store.stored_jit(_affine)(x, a)
    (entry,) = store.glob("*.exe")
    calls = []

    def runs_then_fails(*args):
        calls.append(args)
        return _FailsWhenRead()

    monkeypatch.setattr(compiled_store.serialize_executable, "deserialize_and_load",
                        lambda *args, **kwargs: runs_then_fails)
    before = compiled_store.counts()
    step = compiled_store.stored_jit(_affine)
    assert step(x, a).tolist() == want
    assert step(x, a).tolist() == want
    assert len(calls) == 1  # the loaded executable ran once, then the fresh compile served
    assert _delta(before) == {"compiled": 1, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 1}
    assert not entry.exists()


def test_the_size_cap_removes_the_least_recently_used(store, monkeypatch):
    step = compiled_store.stored_jit(_affine)
    step(np.arange(2, dtype=np.float32), np.float32(1))
    (first,) = store.glob("*.exe")
    # room for one entry of about this size, not two (one over the cap alone is not kept)
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", str(first.stat().st_size * 3 // 2))
    os.utime(first, (1, 1))  # long unused
    step(np.arange(3, dtype=np.float32), np.float32(1))  # a second program: over the cap
    left = list(store.glob("*.exe"))
    assert len(left) == 1 and left[0].name != first.name


def test_a_write_cut_off_long_ago_is_removed_and_one_under_way_is_kept(store):
    step = compiled_store.stored_jit(_affine)
    step(np.arange(2, dtype=np.float32), np.float32(1))
    cut_off, under_way = store / ".tmp-cutoff", store / ".tmp-underway"
    cut_off.write_bytes(b"x" * 1000)  # a process killed inside a write left it
    under_way.write_bytes(b"y")
    os.utime(cut_off, (1, 1))  # in 1970: far older than STALE_TEMP_SECONDS
    step(np.arange(3, dtype=np.float32), np.float32(1))  # a second program: a write
    assert sorted(p.name for p in store.iterdir() if not p.name.endswith(".exe")) == [
        ".tmp-underway"]
    assert len(_entries(store)) == 2


def test_threads_asking_for_one_program_compile_it_once(store):
    step = compiled_store.stored_jit(_affine)
    x, a = np.arange(7, dtype=np.float32), np.float32(2)
    before = compiled_store.counts()
    results = []
    threads = [threading.Thread(target=lambda: results.append(step(x, a).tolist()))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(x * 2 + 1).tolist()] * 4
    assert _delta(before)["compiled"] + _delta(before)["loaded"] == 1


def test_a_bad_cap_is_refused_naming_the_variable(store, monkeypatch):
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", "lots")
    with pytest.raises(ValueError, match=r"DATARAX_COMPILE_CACHE_BYTES: cannot read 'lots' as a "
                                         r"size; write e\.g\. 20G, 512M or 1000000\."):
        compiled_store.stored_jit(_affine)(np.arange(9, dtype=np.float32), np.float32(2))


def test_a_compile_option_this_xla_does_not_know_is_left_out(store, monkeypatch):
    # an XLA of another jaxlib may not know an option datarax passes: the step still
    # compiles (with the options it knows) and gives its values
    backend = jax.default_backend()
    options = {**compiled_store.compiler_options(), "xla_no_such_option_datarax": True}
    monkeypatch.setitem(compiled_store.COMPILER_OPTIONS, backend, options)
    step = compiled_store.stored_jit(_affine)
    x = np.arange(10, dtype=np.float32)
    assert step(x, np.float32(3)).tolist() == (x * 3 + 1).tolist()


def test_a_step_jax_served_from_its_persistent_cache_is_not_stored(store, tmp_path, monkeypatch):
    """Two processes on one JAX cache folder, in one: an executable JAX loaded from its
    cache serializes (on CPU) without its compiled functions, so only the one XLA
    compiled is stored, and it runs once loaded."""
    x, a = np.arange(11, dtype=np.float32), np.float32(3)
    want = (x * 3 + 1).tolist()
    with _jax_persistent_cache(tmp_path / "jax"):
        jax.clear_caches()  # compiled now, not served by JAX's memory of an earlier test
        before = compiled_store.counts()
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
        assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 1, "corrupt": 0}
        jax.clear_caches()  # the second "process": JAX's folder warm, its memory empty
        other = tmp_path / "other"
        monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(other))
        before = compiled_store.counts()
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
        assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 0, "corrupt": 0}
        assert _entries(other) == []
        monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(store))
        before = compiled_store.counts()
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == want
        assert _delta(before) == {"compiled": 0, "loaded": 1, "reused": 0, "stored": 0, "corrupt": 0}


@pytest.mark.skipif(not hasattr(jax.monitoring, "unregister_event_listener"),
                    reason="JAX < 0.8.1: the store's listener is process-wide, a clear ends it")
def test_a_user_clearing_jax_listeners_does_not_get_a_jax_served_step_stored(store, tmp_path,
                                                                          monkeypatch):
    """``jax.monitoring.clear_event_listeners()`` between compiles takes away nothing the
    store listens with: a step JAX's cache served is still not stored; one cleared during
    the compile counts as served (unsure: not stored)."""
    x, a = np.arange(13, dtype=np.float32), np.float32(2)
    with _jax_persistent_cache(tmp_path / "jax"):
        jax.clear_caches()
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == (x * 2 + 1).tolist()
        assert len(_entries(store)) == 1
        jax.clear_caches()
        jax.monitoring.clear_event_listeners()
        other = tmp_path / "other"
        monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(other))
        assert compiled_store.stored_jit(_affine)(x, a).tolist() == (x * 2 + 1).tolist()
        assert _entries(other) == []
    lowered = jax.jit(_affine).lower(np.arange(14, dtype=np.float32), a)
    assert compiled_store.compile_here(lowered)[1] is True  # XLA compiled it here
    compile_with_options = compiled_store.compile_with_options

    def cleared_meanwhile(*args):
        jax.monitoring.clear_event_listeners()
        return compile_with_options(*args)

    monkeypatch.setattr(compiled_store, "compile_with_options", cleared_meanwhile)
    assert compiled_store.compile_here(lowered)[1] is False


def test_the_retry_without_an_unknown_option_still_weighs_the_program(monkeypatch):
    # a heavy program (a long chain of ops) compiles without the elemental emitters; the
    # compile again without an option XLA refused must weigh that program, not XLA's error
    class Lowered:
        given: list = []

        def as_text(self):
            return "HEAVY program"

        def compile(self, compiler_options=None):
            self.given.append(compiler_options)
            if len(self.given) == 1:
                raise jax.errors.JaxRuntimeError("No such compile option 'xla_no_such_option'")
            return "compiled"

    backend = jax.default_backend()
    monkeypatch.setitem(compiled_store.COMPILER_OPTIONS, backend,
                        {"xla_cpu_use_fusion_emitters": False, "xla_no_such_option": True})
    monkeypatch.setattr(compiled_store, "_UNKNOWN_OPTIONS", set())
    monkeypatch.setattr(compiled_store, "program_weight",
                        lambda text: 10**6 if "HEAVY" in text else 1)
    assert compiled_store.compile_with_options(Lowered()) == "compiled"
    assert Lowered.given == [{"xla_no_such_option": True}, None]


def test_a_compile_error_that_is_not_an_unknown_option_is_raised(store, monkeypatch):
    backend = jax.default_backend()
    options = {**compiled_store.compiler_options(), "xla_backend_optimization_level": "fast"}
    monkeypatch.setitem(compiled_store.COMPILER_OPTIONS, backend, options)
    with pytest.raises(Exception, match="xla_backend_optimization_level"):
        compiled_store.stored_jit(_affine)(np.arange(6, dtype=np.float32), np.float32(2))


def test_the_on_off_variable_takes_its_words_and_refuses_any_other(store, monkeypatch):
    for word, on in (("", True), ("1", True), ("yes", True), ("false", False), (" Off ", False),
                     ("NO", False), ("0", False)):
        monkeypatch.setenv("DATARAX_COMPILE_CACHE", word)
        assert (compiled_store.cache_dir() == store) is on, word
        assert (compiled_store.cache_dir() is None) is not on, word
    monkeypatch.setenv("DATARAX_COMPILE_CACHE", "none")  # meant as off: not read as on
    with pytest.raises(ValueError, match=r"DATARAX_COMPILE_CACHE='none' is neither on nor off: "
                                         r"set it to 0 \(also false, off, no\) to turn it off"):
        compiled_store.stored_jit(_affine)(np.arange(2, dtype=np.float32), np.float32(2))


def test_the_switch_is_refused_with_several_devices_too(store, monkeypatch):
    x = np.arange(4, dtype=np.float32)
    lowered = jax.jit(_affine).lower(x, np.float32(2))
    monkeypatch.setattr(compiled_store.jax, "device_count", lambda: 2)  # the store is skipped
    monkeypatch.setenv("DATARAX_COMPILE_CACHE", "disable")
    with pytest.raises(ValueError, match=r"^DATARAX_COMPILE_CACHE='disable' is neither on nor off"):
        compiled_store.compile_lowered(lowered, (x, np.float32(2)))
    monkeypatch.setenv("DATARAX_COMPILE_CACHE", "1")
    compiled = compiled_store.compile_lowered(lowered, (x, np.float32(2)))
    assert compiled(x, np.float32(2)).tolist() == [1, 3, 5, 7]
    assert not store.exists()  # several devices: nothing stored


def test_a_folder_given_with_a_tilde_or_relative_is_made_absolute(monkeypatch, tmp_path):
    monkeypatch.delenv("DATARAX_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", "~/steps")
    assert compiled_store.cache_dir() == tmp_path / "steps"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", "relative/steps")
    assert compiled_store.cache_dir() == tmp_path / "relative" / "steps"


def test_a_folder_that_cannot_be_made_is_refused_saying_what_to_point_where(store, monkeypatch):
    blocker = store.parent / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_DIR", str(blocker / "compiled"))
    with pytest.warns(RuntimeWarning, match=r"cannot be created .*To keep them, point "
                                            r"XDG_CACHE_HOME or DATARAX_COMPILE_CACHE_DIR at a "
                                            r"folder you may write; to silence this"):
        out = compiled_store.stored_jit(_affine)(np.arange(3, dtype=np.float32), np.float32(2))
    assert out.tolist() == [1.0, 3.0, 5.0]


def test_an_entry_of_another_jax_version_is_not_served(store, monkeypatch):
    x, a = np.arange(4, dtype=np.float32), np.float32(5)
    compiled_store.stored_jit(_affine)(x, a)
    monkeypatch.setattr(compiled_store.jax, "__version__", "0.0.1-another")
    before = compiled_store.counts()
    assert compiled_store.stored_jit(_affine)(x, a).tolist() == (x * 5 + 1).tolist()
    assert _delta(before) == {"compiled": 1, "loaded": 0, "reused": 0, "stored": 1, "corrupt": 0}
    assert len(_entries(store)) == 2  # the other version's entry is left for it


def test_a_cap_smaller_than_an_entry_keeps_none_and_a_negative_cap_is_refused(store, monkeypatch):
    step = compiled_store.stored_jit(_affine)
    step(np.arange(2, dtype=np.float32), np.float32(1))
    assert len(_entries(store)) == 1
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", "100")  # under any one entry
    before = compiled_store.counts()
    assert step(np.arange(3, dtype=np.float32), np.float32(1)).tolist() == [1.0, 2.0, 3.0]
    assert _delta(before)["stored"] == 0
    assert _entries(store) == []  # the folder fits the cap: the older entry went too
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", "-1")
    with pytest.raises(ValueError, match=r"must be >= 0, got '-1'; 0 keeps nothing"):
        step(np.arange(4, dtype=np.float32), np.float32(1))


def test_a_thread_waiting_on_a_compile_cut_off_by_ctrl_c_compiles_it_itself(store,
                                                                             monkeypatch):
    """The compiling thread's KeyboardInterrupt is its own: a thread waiting for that
    program (the compile-ahead thread, another loop) compiles it, not dies of it."""
    waiting, go = threading.Event(), threading.Event()

    class SeenFuture(compiled_store.Future):
        def result(self, timeout=None):
            waiting.set()
            return super().result(timeout)

    compile_lowered = compiled_store.compile_lowered
    cut = []

    def cut_once(lowered, args):
        if not cut:
            cut.append(True)
            go.wait()
            raise KeyboardInterrupt
        return compile_lowered(lowered, args)

    monkeypatch.setattr(compiled_store, "Future", SeenFuture)
    monkeypatch.setattr(compiled_store, "compile_lowered", cut_once)
    step = compiled_store.stored_jit(_affine)
    x, a = np.arange(11, dtype=np.float32), np.float32(2)
    met: dict[str, object] = {}

    def call(name):
        try:
            met[name] = step(x, a).tolist()
        except BaseException as err:  # noqa: BLE001 - what each thread met
            met[name] = type(err).__name__

    owner = threading.Thread(target=call, args=("owner",))
    owner.start()
    assert eventually(lambda: cut)  # the owner is compiling
    waiter = threading.Thread(target=call, args=("waiter",))
    waiter.start()
    assert eventually(waiting.is_set)  # the waiter waits on the owner's compile
    go.set()
    owner.join()
    waiter.join()
    assert met == {"owner": "KeyboardInterrupt", "waiter": (x * 2 + 1).tolist()}
