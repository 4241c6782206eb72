"""Checks in this folder need 8 CPU devices (run by tests/devices/test_on_eight_devices.py)."""

import sys
from pathlib import Path

import jax
import pytest

PARENT = str(Path(__file__).resolve().parent.parent)
if PARENT not in sys.path:
    sys.path.insert(0, PARENT)


@pytest.fixture(autouse=True)
def _eight_devices():
    if jax.device_count() != 8:
        pytest.fail("run with XLA_FLAGS=--xla_force_host_platform_device_count=8")
