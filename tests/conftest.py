"""Shared test set-up: CPU only, one JAX persistent compilation cache per test run, no
compile ahead at construction (tests/pipeline/test_compile_ahead.py tests it).

The tests build thousands of small pipelines whose steps lower to the same few programs;
JAX's own persistent cache (keyed by the lowered program, so never stale) lets each
xdist worker and each subprocess reuse what another compiled. The run makes its own
cache folder and removes it at the end; a ``JAX_COMPILATION_CACHE_DIR`` you set is used
as is. This is the test suite's choice: datarax itself changes no JAX option. datarax's
own store of compiled steps goes to a per-run folder too (``DATARAX_COMPILE_CACHE_DIR``),
never to ``~/.cache``; nor do its shard cache (``DATARAX_CACHE_DIR``) and the datasets
library's (``HF_DATASETS_CACHE``): a folder of each per test process.
"""

import gc
import os
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# LLVM optimization level 0: the suite's time is mostly XLA compiling thousands of small
# programs, each run a few times, and -O0 compiles them faster (~2x for the image
# operators). Subprocesses inherit it. Floats may differ from -O3's in the last bit (no
# fused multiply-add): the tests compare two paths at the same level, or with tolerances.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"
)

# No compile ahead at construction: many tests build pipelines they never iterate (or
# break after one batch), and the programs compiled ahead for them are CPU the 2-core run
# does not have. tests/pipeline/test_compile_ahead.py turns it back on where it is tested.
os.environ.setdefault("DATARAX_COMPILE_AHEAD", "0")

import pytest  # noqa: E402

try:  # the same examples every run: a CI run fails only where the last one would have
    from hypothesis import HealthCheck, settings

    settings.register_profile("datarax-tests", derandomize=True, database=None,
                              deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("datarax-tests")
except ImportError:  # hypothesis is in the dev extra; the tests that use it import it
    pass

_HERE = os.path.dirname(os.path.abspath(__file__))
# helpers several test folders share: bad_rows.py, int_record_files.py, number_sources.py,
# source_reads.py, hf_files.py, tfds_datasets.py, jax_processes.py, fresh_process.py
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

_RUN_CACHE: list[str] = []  # the folder this run made (the controller's, not a worker's)
if not os.environ.get("DATARAX_COMPILE_CACHE_DIR"):  # datarax's own step store: never ~/.cache
    _RUN_CACHE.append(tempfile.mkdtemp(prefix="datarax-tests-steps-"))
    os.environ["DATARAX_COMPILE_CACHE_DIR"] = os.path.join(_RUN_CACHE[-1], "compiled")
# datarax's shard cache (the local copies of remote files, DATARAX_CACHE_DIR) and the
# datasets library's cache (HF_DATASETS_CACHE): never ~/.cache (shared with other runs),
# and one folder per test process (xdist worker): each process has its own memory://
# store, whose URLs another process's tests reuse, and datasets names a cached table by a
# fingerprint that two tests' data may share
_CACHES = "DATARAX_TESTS_CACHES"  # the run's folder of them: made once, by the controller
if not os.environ.get(_CACHES):
    _RUN_CACHE.append(tempfile.mkdtemp(prefix="datarax-tests-caches-"))
    os.environ[_CACHES] = _RUN_CACHE[-1]
_MINE = os.path.join(os.environ[_CACHES], os.environ.get("PYTEST_XDIST_WORKER", "main"))
for _name, _folder in (("DATARAX_CACHE_DIR", "shards"), ("HF_DATASETS_CACHE", "hf_datasets")):
    if not os.environ.get(_name) or os.environ[_name].startswith(os.environ[_CACHES]):
        os.environ[_name] = os.path.join(_MINE, _folder)  # yours, if you set one, is kept


def pytest_configure(config):
    if hasattr(config, "workerinput") or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return  # an xdist worker inherits the controller's folder through the environment
    path = tempfile.mkdtemp(prefix="datarax-tests-xla-")
    _RUN_CACHE.append(path)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    if "jax" in sys.modules:  # imported before this hook: tell it directly
        import jax

        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def pytest_unconfigure(config):
    for path in _RUN_CACHE:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def young_heap():
    """Objects that existed before the test are left out of garbage collection while it
    runs (gc.freeze), so a gc.collect() in it walks what the test made (pipelines,
    iterators, their threads) instead of every library's objects: ~0.4 s less a call.
    It can only collect less, so a thread left alive is still found
    (datarax.testing.conformance.check_close_releases_threads)."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def hf_offline(tmp_path, monkeypatch):
    """No Hugging Face Hub access (CI has no network); ``datasets``' cache in ``tmp_path``."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)
    datasets.disable_progress_bars()
