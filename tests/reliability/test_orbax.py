"""Pipeline/iterator state saved and restored by Orbax next to an NNX model's state."""

from __future__ import annotations

import runpy
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

import datarax.checkpoint
from datarax.core.errors import ConfigError, StateError
from datarax.testing import collect, to_host

from reliability_sources import make_memory_pipeline

ROOT = Path(__file__).resolve().parents[2]


def make():
    return make_memory_pipeline(10, 3, shuffle=True, stochastic=True, shard_index=0, shard_count=1)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("what", ["pipeline", "iterator"])
def test_data_and_model_state_round_trip_through_checkpoint_manager(tmp_path, what):
    expected = collect(make(), 2)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(4))
    pipeline = make()
    it = iter(pipeline)
    seen = [to_host(next(it)) for _ in range(2)]
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        assert datarax.checkpoint.save(
            manager, 7, pipeline if what == "pipeline" else it,
            model=ocp.args.StandardSave(nnx.state(model)),
        )
        manager.wait_until_finished()
    it.close()

    fresh_model = nnx.Linear(3, 2, rngs=nnx.Rngs(99))
    fresh = make()
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        assert manager.latest_step() == 7
        if what == "pipeline":
            restored = datarax.checkpoint.restore(
                manager, None, fresh, model=ocp.args.StandardRestore(nnx.state(fresh_model))
            )
            rest = collect(fresh, 2)
        else:
            fresh_it = iter(fresh)
            restored = datarax.checkpoint.restore(
                manager, 7, fresh_it, model=ocp.args.StandardRestore(nnx.state(fresh_model))
            )
            rest = [(0, to_host(b)) for b in fresh_it] + collect(fresh, 2)
    nnx.update(fresh_model, restored.model)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(nnx.state(model)), _leaves(nnx.state(fresh_model))))
    assert restored.data["position"] == 6
    got = [(0, b) for b in seen] + rest
    assert len(got) == len(expected)
    for (e1, b1), (e2, b2) in zip(got, expected):
        assert e1 == e2
        for k in b1:
            np.testing.assert_array_equal(b1[k], b2[k])


def test_a_relative_folder_is_resolved_and_a_relative_manager_is_explained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(4))
    pipeline = make()
    it = iter(pipeline)
    next(it)
    with datarax.checkpoint.checkpoint_manager("ckpt") as manager:
        assert str(manager.directory) == str(tmp_path / "ckpt")
        assert datarax.checkpoint.save(manager, 1, pipeline,
                                       model=ocp.args.StandardSave(nnx.state(model)))
        manager.wait_until_finished()
    it.close()
    monkeypatch.chdir(tmp_path.parent)  # the checkpoint was written to tmp_path / "ckpt"
    fresh, fresh_model = make(), nnx.Linear(3, 2, rngs=nnx.Rngs(9))
    with datarax.checkpoint.checkpoint_manager(tmp_path / "ckpt") as manager:
        restored = datarax.checkpoint.restore(
            manager, None, fresh, model=ocp.args.StandardRestore(nnx.state(fresh_model)))
    assert restored.data["position"] == 3 and fresh.get_state()["position"] == 3
    monkeypatch.chdir(tmp_path)
    with ocp.CheckpointManager("plain") as manager:  # Orbax's own, with a relative folder
        with pytest.raises(ConfigError, match=r"only in an absolute folder, and this "
                           r"CheckpointManager's is 'plain'. Build it with datarax.checkpoint."
                           r"checkpoint_manager\('plain', ...\)"):
            datarax.checkpoint.save(manager, 1, pipeline,
                                    model=ocp.args.StandardSave(nnx.state(model)))
        assert datarax.checkpoint.save(manager, 1, pipeline)  # the data alone: JSON, no arrays
        manager.wait_until_finished()
        with pytest.raises(ConfigError, match="only in an absolute folder"):
            datarax.checkpoint.restore(manager, 1, make(),
                                       model=ocp.args.StandardRestore(nnx.state(model)))
        again = make()
        datarax.checkpoint.restore(manager, 1, again)
    assert again.get_state()["position"] == 3


def test_restore_latest_from_empty_directory_is_refused(tmp_path):
    with ocp.CheckpointManager(tmp_path / "empty") as manager:
        with pytest.raises(FileNotFoundError, match="no checkpoint in"):
            datarax.checkpoint.restore(manager, None, make())


def test_restore_data_refuses_a_non_dict():
    with pytest.raises(StateError, match="holds list, not the state dict"):
        datarax.checkpoint.restore_data(make(), [1, 2])


def test_restore_data_takes_this_process_state_from_every_process_states():
    """A several-process checkpoint's data item holds every process's state; one
    process restoring it (another count) takes process 0's, the same count its own."""
    pipeline = make()
    next(iter(pipeline))
    state = pipeline.get_state()
    fresh = make()
    datarax.checkpoint.restore_data(fresh, {"process_states": [state]})
    assert (fresh.epoch, fresh.position) == (0, 3)
    with pytest.raises(StateError, match=r"'data' item has 'process_states' dict, not the "
                       r"list of every process's state dict .*tampered with"):
        datarax.checkpoint.restore_data(fresh, {"process_states": state})


def test_save_refuses_an_item_named_data(tmp_path):
    with ocp.CheckpointManager(tmp_path / "c") as manager:
        with pytest.raises(ValueError, match="item name 'data' is taken"):
            datarax.checkpoint.save(manager, 1, make(), data=ocp.args.JsonSave({}))


def test_orbax_manager_example_resumes_to_the_same_model(capsys):
    runpy.run_path(str(ROOT / "examples" / "checkpoint" / "orbax_manager.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "resumed at step 12: 32 records into epoch 1" in out
    assert "resumed run matches the uninterrupted run: True" in out


def _ids(batches):
    return [b["x"].tolist() for _, b in batches]


def test_saved_every_two_steps_an_older_step_resumes_across_the_epoch_end(tmp_path):
    """Async saves every 2 steps of a 4-batch epoch; a fresh pipeline restored from an
    older step than the latest (step 2, mid-epoch) serves the rest of epoch 0, then
    epoch 1, exactly as the uninterrupted run (values and order)."""
    expected = collect(make(), 2)
    options = ocp.CheckpointManagerOptions(max_to_keep=None, save_interval_steps=2,
                                           enable_async_checkpointing=True)
    pipeline, step = make(), 0
    with datarax.checkpoint.checkpoint_manager(tmp_path / "c", options=options) as manager:
        for _ in range(2):
            for _batch in pipeline:
                step += 1
                datarax.checkpoint.save(manager, step, pipeline)
        manager.wait_until_finished()
        # every 2nd step (Orbax also writes the first step saved)
        assert [s for s in manager.all_steps() if s > 1] == [2, 4, 6, 8]
    with datarax.checkpoint.checkpoint_manager(tmp_path / "c", options=options) as manager:
        fresh = make()
        datarax.checkpoint.restore(manager, 2, fresh)
    rest = collect(fresh, 2)  # the rest of epoch 0, then epoch 1
    assert _ids(rest) == _ids(expected[2:])
    for (_, got), (_, want) in zip(rest, expected[2:]):
        np.testing.assert_array_equal(got["x"], want["x"])


def test_restoring_a_step_not_kept_names_the_steps_kept(tmp_path):
    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    pipeline = make()
    with datarax.checkpoint.checkpoint_manager(tmp_path / "c", options=options) as manager:
        for step, _batch in enumerate(pipeline, start=1):
            datarax.checkpoint.save(manager, step, pipeline)
        manager.wait_until_finished()
        with pytest.raises(FileNotFoundError, match=r"no step 1 in .*; its steps are \[3, 4\] "
                           r"\(CheckpointManagerOptions\(max_to_keep=...\) deletes"):
            datarax.checkpoint.restore(manager, 1, make())


def test_save_refuses_an_item_that_is_not_checkpoint_args_and_writes_no_step(tmp_path):
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(4))
    with datarax.checkpoint.checkpoint_manager(tmp_path / "c") as manager:
        with pytest.raises(ConfigError, match=r"save: item 'model' is State, not Orbax "
                           r"CheckpointArgs; wrap it, e.g. model=ocp.args.StandardSave\(...\)"):
            datarax.checkpoint.save(manager, 1, make(), model=nnx.state(model))
        manager.wait_until_finished()
        assert manager.all_steps() == []
    assert list((tmp_path / "c").iterdir()) == []  # no unfinished step left behind


def test_swapped_arguments_are_refused_naming_the_call(tmp_path):
    with datarax.checkpoint.checkpoint_manager(tmp_path / "c") as manager:
        with pytest.raises(ConfigError, match=r"save: the data argument is int, which has no "
                           r"get_state\(\)/set_state\(\).*datarax.checkpoint.save\(manager, "
                           r"step, pipeline, \*\*items\)"):
            datarax.checkpoint.save(manager, make(), 3)
        with pytest.raises(ConfigError, match=r"restore: step is str '3', not an int step "
                           r"number \(None: the latest\)"):
            datarax.checkpoint.restore(manager, "3", make())
        assert datarax.checkpoint.save(manager, np.int64(3), make())  # NumPy ints are steps


def test_restoring_a_step_saved_without_the_data_item_says_so(tmp_path):
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(4))
    saves = {"named": ocp.args.Composite(model=ocp.args.StandardSave(nnx.state(model))),
             "unnamed": ocp.args.StandardSave(nnx.state(model))}  # Orbax's alone
    orbax_says = {"named": r"Available items: \['model'\]", "unnamed": "single, unnamed"}
    for kind, args in saves.items():
        with datarax.checkpoint.checkpoint_manager(tmp_path / kind) as manager:
            manager.save(1, args=args)
            manager.wait_until_finished()
            with pytest.raises(StateError, match=rf"step 1 in .*{kind} holds no 'data' item "
                               rf"\(Orbax: .*{orbax_says[kind]}.*\): it was not saved with "
                               r"datarax.checkpoint.save, so it has no pipeline position"
                               ) as error:
                datarax.checkpoint.restore(manager, 1, make(),
                                           model=ocp.args.StandardRestore(nnx.state(model)))
            assert error.value.field == "data"


class Trainer(nnx.Module):
    """A user's module holding model, optimizer and pipeline: one ``nnx.state`` for all."""

    def __init__(self):
        import optax

        self.model = nnx.Linear(2, 1, rngs=nnx.Rngs(4))
        self.optimizer = nnx.Optimizer(self.model, optax.sgd(0.1), wrt=nnx.Param)
        self.pipeline = make()


@nnx.jit
def _train_step(trainer, batch):
    grads = nnx.grad(lambda model: (model(batch["y"]) ** 2).mean())(trainer.model)
    trainer.optimizer.update(trainer.model, grads)


def test_a_trainer_module_holding_the_pipeline_saved_with_standard_checkpointer_resumes(
        tmp_path):
    expected = collect(make(), 2)
    trainer = Trainer()
    it = iter(trainer.pipeline)
    seen = []
    for _ in range(2):
        seen.append((0, to_host(batch := next(it))))
        _train_step(trainer, batch)  # the pipeline's Variables go through nnx.jit too
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "trainer", nnx.state(trainer))
        checkpointer.wait_until_finished()
        fresh = Trainer()
        nnx.update(fresh, checkpointer.restore(tmp_path / "trainer", nnx.state(fresh)))
    assert all(np.array_equal(a, b) for a, b in
               zip(_leaves(nnx.state(trainer.model)), _leaves(nnx.state(fresh.model))))
    assert (fresh.pipeline.epoch, fresh.pipeline.position) == (0, 6)
    got = seen + collect(fresh.pipeline, 2)
    assert [e for e, _ in got] == [e for e, _ in expected]
    for (_, b1), (_, b2) in zip(got, expected):
        for k in b2:
            np.testing.assert_array_equal(b1[k], b2[k])
