"""A pipeline's passes reuse what the last pass placed and compiled (its NNX state on the
device, its steps and their executables: ``pipeline/pass_reuse.py``). The batches of a
multi-epoch run are the ones fresh pipelines hand out epoch by epoch, bit for bit, and a
state saved at an epoch boundary restores exactly — into the same pipeline or a new one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def flip(element, key):
    image = element.data["image"]
    return element.update_data({"image": jnp.where(jax.random.bernoulli(key), image[:, ::-1], image)})


def scale(element, key=None):
    return element.update_data({"image": element.data["image"] / 255.0})


def w1(n: int = 1_000, batch_size: int = 64, prefetch: int = 2) -> Pipeline:
    """W1's stages (/255, a random flip) over a shuffled source with a short last batch."""
    images = np.random.default_rng(0).integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
                          {"image": images, "label": np.arange(n, dtype=np.int32)})
    stages = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=scale),
              ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
    return Pipeline(source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(0),
                    prefetch=prefetch)


def host(batches) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in b.items()} for b in batches]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_every_epoch_of_one_pipeline_is_what_a_fresh_pipeline_serves(prefetch) -> None:
    run = w1(prefetch=prefetch)
    states, epochs = [], []
    for _ in range(4):
        states.append(run.get_state())
        epochs.append(host(run))
    assert [len(e) for e in epochs] == [16] * 4 and len(epochs[0][-1]["label"]) == 1_000 - 15 * 64
    # each epoch its own order: no epoch repeats the last one's batches
    assert not any(same(epochs[i], epochs[i + 1]) for i in range(3))
    for state, epoch in zip(states, epochs):
        fresh = w1(prefetch=prefetch)
        fresh.set_state(state)
        assert same(host(fresh), epoch)


def test_a_restore_at_an_epoch_boundary_is_exact_in_the_same_and_a_new_pipeline() -> None:
    run = w1()
    for _ in range(2):
        for _ in run:
            pass
    saved = run.get_state()  # the epoch boundary: epoch 2 about to start
    assert (saved_epoch := run.epoch) == 2
    expect = host(run) + host(run)  # epochs 2 and 3
    run.set_state(saved)  # back in the pipeline whose last pass was epoch 3
    assert run.epoch == saved_epoch
    assert same(host(run) + host(run), expect)
    fresh = w1()
    fresh.set_state(saved)
    assert same(host(fresh) + host(fresh), expect)


def test_a_restore_mid_epoch_then_the_next_epoch_is_exact() -> None:
    run = w1()
    iterator = iter(run)
    for _ in range(5):
        next(iterator)
    saved = iterator.get_state()
    expect = host(iterator) + host(run)  # the rest of epoch 0, then epoch 1
    run.set_state(saved)
    assert same(host(run) + host(run), expect)



def test_an_epoch_under_other_jax_settings_is_what_a_fresh_pipeline_serves_there() -> None:
    # positions become int64 under x64: the last pass's executables do not apply
    run = w1(prefetch=0)
    host(run)
    saved = run.get_state()
    with jax.enable_x64(True):
        wide = host(run)
        fresh = w1(prefetch=0)
        fresh.set_state(saved)
        assert same(host(fresh), wide)
    fresh = w1(prefetch=0)
    fresh.set_state(run.get_state())
    assert same(host(run), host(fresh))  # and back without x64


def test_four_epochs_of_w1_are_the_batches_served_before_orders_were_made_ahead() -> None:
    """The digest of W1's batches over four epochs, taken with each epoch's order built
    and placed by the pass that read it (before ``order_tables`` made them ahead)."""
    import hashlib

    run, digest = w1(prefetch=0), hashlib.sha256()
    for _ in range(4):
        for batch in run:
            for name in sorted(batch):
                digest.update(name.encode())
                digest.update(np.asarray(batch[name]).tobytes())
    assert digest.hexdigest() == "1447a87fa7fa5e800cac2cc4be5afc76790a5d39b5694de0fe06733130dfbd50"
