"""One writer per dataset folder: a second ``convert`` / ``write_dataset`` into the same
DST while one runs (another process, another thread) is refused naming the folder."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from datarax.cli.main import main
from datarax.dataset.conversion import convert
from datarax.dataset.lock import LOCK_FILE
from datarax.dataset.writer import ConversionError, write_dataset

ROWS = [{"x": np.int32(i)} for i in range(6)]


def npy(tmp_path) -> str:
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6, dtype=np.int32))
    return str(path)


def test_a_conversion_into_a_folder_another_process_writes_is_refused(tmp_path, capsys):
    dst = tmp_path / "out"
    dst.mkdir()
    fd = os.open(dst / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # what a running writer holds
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242 on otherhost")
    try:
        with pytest.raises(ConversionError) as err:
            convert(npy(tmp_path), dst)
        message = str(err.value)
        assert f"'{dst}' is being written by another conversion (process 4242 on otherhost" in message
        assert "this conversion was refused" in message and "Wait for that conversion" in message
        assert os.listdir(dst) == [LOCK_FILE]  # nothing written
        with pytest.raises(ConversionError, match="this write was refused"):
            write_dataset(ROWS, dst)
        assert main(["convert", npy(tmp_path), str(dst)]) != 0  # the CLI: the message, no traceback
        assert "is being written by another conversion" in capsys.readouterr().err
    finally:
        os.close(fd)
    info, _ = convert(npy(tmp_path), dst)  # the other writer is gone
    assert info.num_records == 6 and LOCK_FILE not in os.listdir(dst)


def test_a_write_into_a_folder_another_thread_writes_is_refused(tmp_path):
    dst = tmp_path / "out"
    started, finish = threading.Event(), threading.Event()
    results: list = []

    def slow_rows():  # a one-pass iterable: the first write waits inside its loop
        for row in ROWS:
            started.set()
            finish.wait(30)
            yield row

    first = threading.Thread(target=lambda: results.append(write_dataset(slow_rows(), dst)))
    first.start()
    try:
        assert started.wait(30)
        with pytest.raises(ConversionError, match=r"another thread of this process .* so this "
                           r"write was refused"):
            write_dataset(ROWS, dst, overwrite=True)
    finally:
        finish.set()
        first.join(30)
    assert results and results[0][0].num_records == 6  # the first write was not disturbed
    assert sorted(os.listdir(dst)) == ["data-00000-of-00001.array_record", "datarax_dataset.json"]


def test_the_lock_goes_with_a_killed_writer_process(tmp_path):
    dst = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from datarax.dataset.lock import folder_lock\n"
         f"with folder_lock({str(dst)!r}, error=RuntimeError):\n"
         "    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConversionError, match=f"process {holder.pid} on "):
            write_dataset(ROWS, dst)
    finally:
        holder.kill()
        holder.wait(30)
    info, _ = write_dataset(ROWS, dst)  # killed: the operating system dropped its lock
    assert info.num_records == 6


def test_a_refused_or_failed_write_leaves_no_folder_it_created(tmp_path):
    dst = tmp_path / "never"
    with pytest.raises(Exception, match="shards must be an int >= 1"):
        write_dataset(ROWS, dst, shards=0)
    assert not dst.exists()


def _held_by_another_process(dst) -> int:
    """``dst`` locked as a running writer in another process holds it; the descriptor."""
    dst.mkdir()
    fd = os.open(dst / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242 on otherhost")
    return fd


def test_a_beam_conversion_into_a_folder_another_process_writes_is_refused(tmp_path):
    pytest.importorskip("apache_beam")
    from datarax.beam import convert_rows

    dst = tmp_path / "out"
    fd = _held_by_another_process(dst)
    try:  # refused before the pipeline is built: nothing of Beam runs
        with pytest.raises(ConversionError) as err:
            convert_rows(ROWS, dst, shards=2)
        message = str(err.value)
        assert f"'{dst}' is being written by another conversion (process 4242 on otherhost" in message
        assert "this conversion was refused" in message
        assert os.listdir(dst) == [LOCK_FILE]  # nothing written
    finally:
        os.close(fd)


def test_a_url_destination_is_not_locked(tmp_path, monkeypatch):
    from datarax.dataset.lock import folder_lock

    monkeypatch.chdir(tmp_path)
    with folder_lock("gs://bucket/ds", error=ConversionError):
        with folder_lock("gs://bucket/ds", error=ConversionError):
            pass
    assert os.listdir(tmp_path) == []  # no local folder named after the URL
