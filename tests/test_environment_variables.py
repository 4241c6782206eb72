"""Every ``DATARAX_*`` variable is read one way (``datarax/host/settings.py``): both size
variables take the same forms, both folder variables expand ``~`` and make a relative path
absolute, a bad value is a ConfigError naming the variable and the value, and
docs/reliability.md's table lists every variable the library reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from datarax.core import compiled_store
from datarax.errors import ConfigError
from datarax.storage import ShardCache, default_cache_dir
from datarax.storage.retry import RetryPolicy

ROOT = Path(__file__).resolve().parents[1]

SIZES = {"DATARAX_CACHE_BYTES": lambda: ShardCache("/nowhere").max_bytes,
         "DATARAX_COMPILE_CACHE_BYTES": compiled_store.cap_bytes}
FOLDERS = {"DATARAX_CACHE_DIR": default_cache_dir,
           "DATARAX_COMPILE_CACHE_DIR": lambda: str(compiled_store.cache_dir())}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_both_size_variables_take_the_same_forms(monkeypatch, name):
    read = SIZES[name]
    for given, size in (("512M", 512 << 20), ("20G", 20 << 30), ("512MiB", 512 << 20),
                        ("1.5K", 1536), (" 1000000 ", 1000000), ("7", 7)):
        monkeypatch.setenv(name, given)
        assert read() == size, given
    for blank in ("", "  "):  # blank is unset: the default
        monkeypatch.setenv(name, blank)
        assert read() == {"DATARAX_CACHE_BYTES": 64 << 30,
                          "DATARAX_COMPILE_CACHE_BYTES": 512 << 20}[name]
    for bad in ("lots", "0.5", "12 parsecs"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError, match=f"^{name}: cannot read '{bad}' as a size; "
                                              r"write e\.g\. 20G, 512M or 1000000\.$"):
            read()


def test_each_size_variable_refuses_a_size_below_its_least(monkeypatch):
    monkeypatch.setenv("DATARAX_CACHE_BYTES", "0")
    with pytest.raises(ConfigError, match=r"^DATARAX_CACHE_BYTES must be > 0, got '0'\.$"):
        ShardCache("/nowhere")
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", "0")  # 0 keeps nothing: allowed
    assert compiled_store.cap_bytes() == 0
    monkeypatch.setenv("DATARAX_COMPILE_CACHE_BYTES", "-1")
    with pytest.raises(ConfigError, match=r"^DATARAX_COMPILE_CACHE_BYTES must be >= 0, got '-1'; "
                                          r"0 keeps nothing, DATARAX_COMPILE_CACHE=0 turns"):
        compiled_store.cap_bytes()


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_both_folder_variables_expand_home_and_make_a_path_absolute(monkeypatch, tmp_path, name):
    monkeypatch.delenv("DATARAX_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    read = FOLDERS[name]
    for given, folder in (("~/c", tmp_path / "home" / "c"), ("rel/c", tmp_path / "rel" / "c"),
                          ("./c/../d", tmp_path / "d"), (str(tmp_path / "abs"), tmp_path / "abs")):
        monkeypatch.setenv(name, given)
        assert read() == str(folder), given
    monkeypatch.setenv(name, "s3://bucket/cache")  # was taken as the folder ./s3:/bucket/cache
    with pytest.raises(ConfigError, match=f"^{name}='s3://bucket/cache' is a URL, but it names "
                                          "a local folder: point it at a folder on a local disk"):
        read()


def test_the_retry_budget_takes_seconds_and_refuses_anything_else(monkeypatch):
    for given, seconds in (("120", 120), ("2.5s", 2.5), ("0", 0), (" ", 60)):
        monkeypatch.setenv("DATARAX_RETRY_BUDGET", given)
        assert RetryPolicy().budget_s == seconds, given
    for bad in ("soon", "-1", "nan", "inf", "1m"):
        monkeypatch.setenv("DATARAX_RETRY_BUDGET", bad)
        with pytest.raises(ConfigError, match=f"^DATARAX_RETRY_BUDGET='{bad}' is not a number of "
                                              r"seconds; .* e\.g\. DATARAX_RETRY_BUDGET=120 "
                                              r"\(default 60\)\.$"):
            RetryPolicy()


def test_docs_list_every_variable_the_library_names():
    named = set()
    for path in (ROOT / "src" / "datarax").rglob("*.py"):
        named |= set(re.findall(r"\bDATARAX_[A-Z_]*[A-Z]\b", path.read_text()))
    assert {"DATARAX_CACHE_BYTES", "DATARAX_RETRY_BUDGET", "DATARAX_COMPILE_AHEAD"} <= named
    text = (ROOT / "docs" / "reliability.md").read_text()
    table = text[text.index("## Environment variables"):]
    table = table[:table.index("\n\n", table.index("\n|"))]
    assert set(re.findall(r"^\| `(DATARAX_\w+)`", table, re.M)) == named
