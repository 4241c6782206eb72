"""Shared test set-up: small arrays, CPU only, one compiled-step cache per session."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

import pytest  # noqa: E402


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
