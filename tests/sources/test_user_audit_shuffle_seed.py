"""The shuffle seed of the dataset sources is the config's, whether or not rngs is passed.

The guide's best practice puts the seed on the config
(``TFDSEagerConfig(name="mnist", split="train", shuffle=True, seed=42)``) and its
examples pass ``rngs=nnx.Rngs(0)`` beside it; ``from_tfds`` / ``from_hf`` pick eager or
streaming for the same config. So: a different ``seed`` gives a different order with the
same ``rngs``, and eager and streaming serve the same (TFDS) order with or without rngs.
"""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.samplers import index_shuffle_np

N = 12


def order(source) -> list[int]:
    pipeline = Pipeline(source=source, stages=[], batch_size=5, rngs=nnx.Rngs(0))
    return [int(v) for b in pipeline for v in np.asarray(b["idx"])]


def feistel(seed: int, n: int = N) -> list[int]:
    return index_shuffle_np(np.arange(n), n - 1, seed).tolist()


# ------------------------------------------------------------------------- HF
@pytest.fixture
def hf_folder(tmp_path, hf_offline):
    from hf_files import write_hub_split

    return write_hub_split(tmp_path / "hf", {"idx": np.arange(N, dtype=np.int32),
                                             "text": [f"t{i}" for i in range(N)]})


def test_hf_eager_shuffle_follows_the_config_seed_with_rngs(hf_folder):
    from datarax.sources import HFEagerConfig, HFEagerSource, from_hf

    def eager(seed, rngs):
        return HFEagerSource(HFEagerConfig(name=hf_folder, split="train", shuffle=True, seed=seed),
                             rngs=rngs)

    with_rngs = order(eager(42, nnx.Rngs(0)))
    assert with_rngs == feistel(42) == order(eager(42, None))
    assert order(eager(7, nnx.Rngs(0))) == feistel(7) != with_rngs
    source = from_hf(hf_folder, "train", shuffle=True, seed=3, rngs=nnx.Rngs(0))
    assert source.config.seed == 3 and order(source) == feistel(3)


# ----------------------------------------------------------------------- TFDS
@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """audit_seed_tiny: N records of one int field."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from tfds_datasets import prepare

    return prepare(tmp_path_factory.mktemp("tfds_seed"), "AuditSeedTiny",
                   {"idx": tfds.features.Tensor(shape=(), dtype=np.int32)},
                   {"train": {i: {"idx": i} for i in range(N)}})


def test_tfds_eager_and_streaming_share_the_config_seed_with_rngs(tfds_dir):
    from datarax.sources import (
        TFDSEagerConfig, TFDSEagerSource, TFDSStreamingConfig, TFDSStreamingSource, from_tfds,
    )

    # TFDS stores a split's records in its own order: the stable index is the position
    # in the split, so orders are compared between sources, not with feistel() of idx.
    kw = dict(name="audit_seed_tiny", split="train", data_dir=tfds_dir, shuffle=True)

    def both(seed, rngs):
        return (order(TFDSEagerSource(TFDSEagerConfig(**kw, seed=seed), rngs=rngs)),
                order(TFDSStreamingSource(TFDSStreamingConfig(**kw, seed=seed), rngs=rngs)))

    eager, stream = both(42, nnx.Rngs(0))
    assert eager == stream == both(42, None)[0] and sorted(eager) == list(range(N))
    eager7, stream7 = both(7, nnx.Rngs(0))
    assert eager7 == stream7 != eager
    picked = [order(from_tfds("audit_seed_tiny", "train", streaming=s, data_dir=tfds_dir,
                              shuffle=True, seed=7, rngs=nnx.Rngs(1))) for s in (False, True)]
    assert picked == [eager7, eager7]
