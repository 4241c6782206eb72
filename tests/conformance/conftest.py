"""Conformance table: shared helpers importable, Hugging Face kept offline."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent / "reliability"):  # rows.py; the reliability helpers it reuses
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@pytest.fixture(scope="session")
def table_dir(tmp_path_factory):
    """The small data files every row reads (written once per session)."""
    from rows import write_table_data

    root = tmp_path_factory.mktemp("conformance")
    write_table_data(root)
    return root


@pytest.fixture(scope="session", autouse=True)
def hf_offline(tmp_path_factory):
    """No Hub access; the datasets cache in tmp; no wait for its threads at shutdown."""
    try:
        import datasets
        import huggingface_hub.constants as hub_constants
    except ImportError:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        patch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        cache = str(tmp_path_factory.mktemp("hf_cache"))
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
        patch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)
        datasets.disable_progress_bars()
        yield
