"""The shard cache folder is private to its user: made 0700, and one that another user
owns or that group or others may write is refused when a source is built (files put
there by someone else would be read as the store's)."""

from __future__ import annotations

import os
import stat

import pytest

fsspec = pytest.importorskip("fsspec")

from number_sources import memory_npy  # noqa: E402

from datarax.errors import ConfigError  # noqa: E402
from datarax.sources import NpySource, NpySourceConfig  # noqa: E402
from datarax.storage import ShardCache  # noqa: E402

URL = "memory://private-cache/x.npy"


@pytest.fixture(autouse=True)
def _npy_file() -> None:
    memory_npy("private-cache")


def _read(folder) -> list[int]:
    source = NpySource(NpySourceConfig(paths=URL), cache=ShardCache(folder, max_bytes="1M")
                       if folder is not None else None)
    try:
        return source.get_batch(4)["data"].tolist()
    finally:
        source.close()


def test_the_folder_and_its_parts_are_made_for_this_user_alone(tmp_path) -> None:
    before = os.umask(0o002)  # a umask that lets the group write what is made
    try:
        assert _read(tmp_path / "made" / "cache") == [0, 1, 2, 3]
    finally:
        os.umask(before)
    for folder in ("", "shards", "locks", "tmp"):
        mode = stat.S_IMODE(os.stat(tmp_path / "made" / "cache" / folder).st_mode)
        assert mode == 0o700, (folder, oct(mode))


@pytest.mark.parametrize("part", ["", "shards"])
def test_a_folder_others_may_write_is_refused_naming_it_and_its_mode(tmp_path, part) -> None:
    assert _read(tmp_path / "cache") == [0, 1, 2, 3]
    os.chmod(tmp_path / "cache" / part, 0o777)
    where = os.path.join(str(tmp_path / "cache"), part) if part else str(tmp_path / "cache")
    with pytest.raises(ConfigError, match=(
            f"the shard cache folder '{where}' is not private to this user: group or others "
            r"may write it \(mode 777\).*chmod 700.*DATARAX_CACHE_DIR")):
        _read(tmp_path / "cache")


@pytest.mark.skipif(os.name != "posix" or os.getuid() != 0, reason="chown needs root")
def test_a_folder_of_another_user_is_refused(tmp_path) -> None:
    (tmp_path / "theirs").mkdir(mode=0o755)
    os.chown(tmp_path / "theirs", 65534, 65534)
    with pytest.raises(ConfigError, match=r"'.*theirs' is not private to this user: it belongs "
                                          r"to user id 65534, not to this user \(0\)"):
        _read(tmp_path / "theirs")


def test_the_compiled_step_store_leaves_the_default_folder_private(tmp_path, monkeypatch) -> None:
    """The compiled-step store lives in the shard cache's default folder; made first, it
    made that folder with the umask's mode (0775 under umask 002), which the cache refused."""
    import jax.numpy as jnp

    from datarax.core.compiled_store import stored_jit

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DATARAX_COMPILE_CACHE_DIR")
    monkeypatch.delenv("DATARAX_CACHE_DIR", raising=False)
    before = os.umask(0o002)
    try:
        assert stored_jit(lambda x: x + 1)(jnp.arange(3)).tolist() == [1, 2, 3]
    finally:
        os.umask(before)
    assert stat.S_IMODE(os.stat(tmp_path / "xdg" / "datarax").st_mode) == 0o700
    assert _read(None) == [0, 1, 2, 3]  # the default folder, ShardCache()
