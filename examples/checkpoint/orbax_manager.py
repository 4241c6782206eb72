"""Save the data pipeline's position with the model in one Orbax CheckpointManager.

A tiny NNX model trains on a shuffled, augmented in-memory dataset. Every few steps
the model parameters and the pipeline state are saved together, as two items of one
checkpoint step. Half-way through the run "crashes"; a new run builds everything
from scratch, restores the latest step and carries on. The resumed run sees exactly
the batches the uninterrupted run would have seen, so its final parameters match.

Run: python examples/checkpoint/orbax_manager.py
"""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

import datarax.checkpoint
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

NUM_RECORDS, BATCH_SIZE, SAVE_EVERY = 64, 8, 3


def build_pipeline() -> Pipeline:
    """The data side: shuffled records, a random augmentation, fixed-size batches."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(NUM_RECORDS, 4)).astype(np.float32)
    y = (x @ np.asarray([1.0, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), {"x": x, "y": y})

    def jitter(element, key):
        noise = 0.01 * jax.random.normal(key, element.data["x"].shape)
        return element.update_data({"x": element.data["x"] + noise})

    augment = ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)
    return Pipeline(source=source, stages=[augment], batch_size=BATCH_SIZE,
                    rngs=nnx.Rngs(0), drop_remainder=True)


def build_model() -> tuple[nnx.Module, nnx.Optimizer]:
    model = nnx.Linear(4, 1, rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, batch):
    def loss_fn(m):
        return jnp.mean((m(batch["x"])[:, 0] - batch["y"]) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train(directory: str, total_steps: int, stop_at: int | None = None) -> nnx.Module:
    """Train to ``total_steps``, resuming from ``directory``'s latest checkpoint if any."""
    pipeline = build_pipeline()
    model, optimizer = build_model()
    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=SAVE_EVERY)
    loss = float("nan")
    with ocp.CheckpointManager(directory, options=options) as manager:
        step = 0
        if manager.latest_step() is not None:
            abstract = nnx.state((model, optimizer))
            restored = datarax.checkpoint.restore(
                manager, None, pipeline, train=ocp.args.StandardRestore(abstract)
            )
            nnx.update((model, optimizer), restored.train)
            step = manager.latest_step()
            print(f"resumed at step {step}: {pipeline.get_state()['position']} records "
                  f"into epoch {pipeline.get_state()['epoch']}")
        while step < total_steps:
            for batch in pipeline:  # each pass is one epoch; a restore continues its epoch
                loss = train_step(model, optimizer, batch)
                step += 1
                # Model and data state of the same step, saved together.
                datarax.checkpoint.save(
                    manager, step, pipeline, train=ocp.args.StandardSave(nnx.state((model, optimizer)))
                )
                if step in (stop_at, total_steps):
                    break
            if step == stop_at:
                print(f"crash at step {step} (loss {float(loss):.4f})")
                return model
        manager.wait_until_finished()
    print(f"finished {total_steps} steps, loss {float(loss):.4f}")
    return model


def main() -> None:
    with tempfile.TemporaryDirectory() as preempted, tempfile.TemporaryDirectory() as clean:
        train(preempted, total_steps=20, stop_at=13)  # last save at step 12
        resumed = train(preempted, total_steps=20)
        reference = train(clean, total_steps=20)
        same = all(
            np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(nnx.state(resumed)), jax.tree.leaves(nnx.state(reference)))
        )
        print("resumed run matches the uninterrupted run:", same)
        assert same


if __name__ == "__main__":
    main()
