"""W10's contenders keep exactly the even records, once each; the plain-jit floor's and
the two-phase loader's batches are the records /255, each flipped horizontally or not."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.contenders.filter_jit import jit_epochs
from benchmarks.contenders.filter_two_phase import two_phase_epochs
from benchmarks.w10_filter import run_one


def test_jit_floor_serves_even_records_once_scaled_and_maybe_flipped() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (50, 4, 5, 3), dtype=np.uint8)
    labels = np.arange(50, dtype=np.int32)
    epoch = jit_epochs(images, labels, batch_size=8, seed=3)
    seen, flipped = [], 0
    for out, label in epoch():
        assert out.dtype == np.float32 and out.shape[0] == label.shape[0] <= 8
        for row, i in zip(out, label):
            plain = images[i].astype(np.float32) / 255.0
            is_flip = np.allclose(row, plain[:, ::-1, :])
            assert is_flip or np.allclose(row, plain)
            flipped += is_flip
        seen.extend(label.tolist())
    assert sorted(seen) == list(range(0, 50, 2))
    assert 0 < flipped < 25  # a random flip per record, not all or none


def test_run_one_checks_the_kept_records() -> None:
    row = run_one("jax_floor", records=600, batch=64, seed=0)
    assert row["ok"] and row["kept"] == 300


def test_owned_jit_floor_keeps_the_images_given_not_the_buffer_refilled() -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(1, 256, (20, 4, 5, 3), dtype=np.uint8)
    original = images.copy()
    labels = np.arange(20, dtype=np.int32)
    epoch = jit_epochs(images, labels, batch_size=4, seed=0, owned=True)
    images[:] = 0  # the caller reuses their buffer once the floor has returned
    for out, label in epoch():
        for row, i in zip(out, label):
            plain = original[i].astype(np.float32) / 255.0
            assert np.allclose(row, plain) or np.allclose(row, plain[:, ::-1, :])


def test_run_one_owned_floor_checks_the_kept_records() -> None:
    row = run_one("jax_floor_owned", records=600, batch=64, seed=0)
    assert row["ok"] and row["kept"] == 300


@pytest.mark.parametrize("compact", ["device", "host"])
def test_two_phase_serves_what_the_traced_predicate_keeps_once_scaled_and_maybe_flipped(
        compact: str) -> None:
    rng = np.random.default_rng(2)
    images = rng.integers(1, 256, (70, 4, 5, 3), dtype=np.uint8)
    original = images.copy()
    labels = np.arange(70, dtype=np.int32)
    epoch = two_phase_epochs(images, labels, batch_size=7, seed=5,
                             predicate=lambda r: r["label"] % 3 == 0, compact=compact)
    images[:] = 0  # the caller reuses their buffer once the loader has returned
    for _ in range(2):  # two epochs, each its own order
        seen, flipped, sizes = [], 0, []
        for out, label in epoch():
            assert out.dtype == np.float32 and out.shape[0] == label.shape[0]
            for row, i in zip(out, label):
                plain = original[i].astype(np.float32) / 255.0
                is_flip = np.allclose(row, plain[:, ::-1, :])
                assert is_flip or np.allclose(row, plain)
                flipped += is_flip
            seen.extend(label.tolist())
            sizes.append(label.shape[0])
        assert sorted(seen) == list(range(0, 70, 3))
        assert sizes == [7, 7, 7, 3]  # 24 kept
        assert 0 < flipped < 24  # a random flip per record, not all or none


def test_two_phase_batches_match_the_host_compaction() -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (40, 2, 3, 3), dtype=np.uint8)
    labels = np.arange(40, dtype=np.int32)
    device, host = (list(two_phase_epochs(images, labels, 6, seed=1, compact=c)())
                    for c in ("device", "host"))
    assert len(device) == len(host) == 4
    for (a, la), (b, lb) in zip(device, host):
        assert la.tolist() == lb.tolist() and np.array_equal(a, b)


def test_run_one_two_phase_checks_the_kept_records() -> None:
    row = run_one("jax_two_phase", records=600, batch=64, seed=0)
    assert row["ok"] and row["kept"] == 300


def test_two_phase_refuses_an_unknown_compaction() -> None:
    with pytest.raises(ValueError, match="compact must be 'device' or 'host', got 'gpu'"):
        two_phase_epochs(np.zeros((4, 1, 1, 1), np.uint8), np.arange(4, dtype=np.int32), 2,
                         seed=0, compact="gpu")
