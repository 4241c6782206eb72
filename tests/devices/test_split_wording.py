"""The refusals of a batch that does not split over this process's devices count their
records and devices in words (``datarax.pipeline.devices.placement_for``); the split is
set to 2 here, since the main test process has one device (tests/devices/eight/ checks
the real 8-device split)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

from datarax.errors import ConfigError
from datarax.pipeline.devices import placement_for
from datarax.sharding.placement import BatchPlacement


@pytest.fixture
def two_devices(monkeypatch):
    monkeypatch.setattr(BatchPlacement, "local_split", property(lambda self: 2))
    return Mesh(np.asarray(jax.devices()[:1]), ("data",)), PartitionSpec("data")


def test_a_last_batch_of_one_record_is_counted_in_the_singular(two_devices):
    with pytest.raises(ConfigError, match=r"^Pipeline sharding: the last batch of each epoch "
                                          r"holds 1 record \(5 in this shard\), which does not "
                                          r"split over this process's 2 devices; set "
                                          r"drop_remainder=True\.$"):
        placement_for(two_devices, batch_size=4, last_records=5)
    with pytest.raises(ConfigError, match=r"holds 3 records \(7 in this shard\), which do not "
                                          r"split over this process's 2 devices;"):
        placement_for(two_devices, batch_size=4, last_records=7)
    assert placement_for(two_devices, batch_size=4, last_records=6).batch_axes == ("data",)


def test_a_batch_size_that_does_not_split_counts_the_devices(two_devices):
    with pytest.raises(ConfigError, match=r"^Pipeline batch_size=3 does not split over this "
                                          r"process's 2 devices on mesh axes \['data'\]; use a "
                                          r"batch size divisible by 2\.$"):
        placement_for(two_devices, batch_size=3, last_records=None)
