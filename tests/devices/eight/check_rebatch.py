"""``Rebatch`` of a pipeline with ``sharding=`` on 8 CPU devices: its batches keep the
pipeline's sharding (a slice of a placed batch would come back replicated on every
device), and a split into parts that do not split over the devices is refused."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from datarax.core.errors import ConfigError
from datarax.pipeline.rebatch import Rebatch
from devices_sources import host, make_pipeline


def mesh_2d() -> Mesh:
    return Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))


@pytest.mark.parametrize("kind", ["indexed", "host"])
@pytest.mark.parametrize("how, sizes", [({"split": 2}, [8, 8, 8, 8, 8]), ({"group": 2}, [32, 8])])
def test_rebatched_batches_keep_the_pipelines_sharding(kind, how, sizes):
    mesh = mesh_2d()
    got = list(Rebatch(make_pipeline(kind, 40, 16, shuffle=True,
                                     sharding=(mesh, P("data", "model"))), **how))
    want = [host(b) for b in Rebatch(make_pipeline(kind, 40, 16, shuffle=True), **how)]
    assert [b["x"].shape[0] for b in got] == sizes
    for g, w in zip(got, want, strict=True):
        assert g["x"].sharding == NamedSharding(mesh, P("data"))
        assert g["y"].sharding == NamedSharding(mesh, P("data", "model"))
        for name in w:
            np.testing.assert_array_equal(np.asarray(g[name]), w[name])


def test_a_split_whose_parts_do_not_split_over_the_devices_is_refused():
    pipeline = make_pipeline("indexed", 40, 16, sharding=(Mesh(np.asarray(jax.devices()),
                                                               ("data",)), P("data")))
    with pytest.raises(ConfigError, match=r"Rebatch split=4 cuts the pipeline's batches of 16 "
                       r"into parts of 4 records, which do not split over the 8 devices of "
                       r"its sharding= \(mesh axes \['data'\]\); choose a split k with 16 // k "
                       r"divisible by 8, or build the pipeline with a batch_size that is a "
                       r"multiple of 32 \(4 parts of 8 records\)\."):
        Rebatch(pipeline, split=4)
