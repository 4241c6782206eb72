"""Seed 000 (ArrayRecord quick reference): every code block runs unchanged; the example runs.

The blocks are copied verbatim from the page. Their ``/path/to/...`` files are written
under ``tmp_path`` and the blocks run with that prefix substituted, nothing else
changed. Names a block uses but the page leaves to the reader (``normalize_op``,
``train_step``, ``max_steps``) are provided.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest
from int_record_files import write_records
from waiting import eventually, threads_started_since

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "integration" / "arrayrecord" / "01_arrayrecord_quickref.py"

CONFIG_BLOCK = '''
from datarax.sources import ArrayRecordSourceConfig

config = ArrayRecordSourceConfig(
    seed=42,
    num_epochs=10,       # Run for 10 epochs
    shuffle_files=True,  # Reshuffle record order each epoch
)
'''

CREATE_BLOCK = '''
import numpy as np
from datarax.sources import ArrayRecordSourceModule, ArrayRecordSourceConfig
from flax import nnx


def decode(record: bytes) -> dict[str, np.ndarray]:
    # ArrayRecord records are bytes; turn one into a dict of arrays.
    return {"data": np.frombuffer(record, dtype=np.float32)}


# Single file
source = ArrayRecordSourceModule(
    ArrayRecordSourceConfig(seed=42),
    paths="/path/to/data.riegeli",
    decode=decode,
    rngs=nnx.Rngs(0),
)

# Multiple files with glob pattern
source = ArrayRecordSourceModule(
    ArrayRecordSourceConfig(seed=42, shuffle_files=True),
    paths="/path/to/data-*.riegeli",
    decode=decode,
    rngs=nnx.Rngs(0),
)

# List of specific files
source = ArrayRecordSourceModule(
    ArrayRecordSourceConfig(num_epochs=10),
    paths=[
        "/path/to/train-00000.riegeli",
        "/path/to/train-00001.riegeli",
    ],
    decode=decode,
    rngs=nnx.Rngs(0),
)
'''

PIPELINE_BLOCK = '''
from datarax.pipeline import Pipeline

# Create pipeline from ArrayRecord source; each pass covers one epoch
pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))

# Add transformations
# Pipeline stages are set at construction; rebuild with normalize_op in stages.
pipeline = Pipeline(
    source=pipeline.source,
    stages=[normalize_op],
    batch_size=pipeline.batch_size,
    rngs=nnx.Rngs(0),
)

# Iterate
for batch in pipeline:
    # Process batch
    print(f"Batch shape: {batch['data'].shape}")
'''

CHECKPOINT_BLOCK = '''
# Save checkpoint
state = source.get_state()
# state = {"current_index": 1234, "current_epoch": 5, ...}

# Later: restore from checkpoint
source.set_state(state)
# Resumes from exact position
'''

FINITE_EPOCHS_BLOCK = '''
# Run for exactly 10 epochs
config = ArrayRecordSourceConfig(num_epochs=10)
source = ArrayRecordSourceModule(config, paths=paths, decode=decode, rngs=nnx.Rngs(0))

pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))
for epoch in range(10):
    for batch in pipeline:
        train_step(batch)
# Each iter(pipeline) session covers one pass over the source.
'''

STEP_BLOCK = '''
# Run until a step budget is reached, re-entering the pipeline per epoch
pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))

step = 0
while step < max_steps:
    for batch in pipeline:
        train_step(batch)
        step += 1
        if step >= max_steps:
            break
'''

SHUFFLE_BLOCK = '''
config = ArrayRecordSourceConfig(
    seed=42,
    shuffle_files=True,
)
# Epoch 0: shuffled with seed=42
# Epoch 1: reshuffled with seed=43
# Epoch 2: reshuffled with seed=44
'''

EXPECTED_OUTPUT = """============================================================
ArrayRecord Source Quick Reference
============================================================

This quick reference demonstrates the ArrayRecordSourceModule API.
It reads ArrayRecord files it wrote itself (any file name works).

Key API Summary:

  1. Configuration:
     config = ArrayRecordSourceConfig(
         seed=42,
         num_epochs=-1,
         shuffle_files=True,
     )

  2. Source Creation:
     source = ArrayRecordSourceModule(
         config,
         paths="/path/to/*.array_record",
         decode=decode,
         rngs=nnx.Rngs(0),
     )

  3. Pipeline Integration:
     pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))

  4. Checkpointing:
     state = source.get_state()
     source.set_state(state)

============================================================
Quick reference completed!
============================================================
"""


def write(path: pathlib.Path, start: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_records(path, (np.full(3, i, dtype=np.float32).tobytes()
                         for i in range(start, start + count)))


@pytest.fixture
def page(tmp_path):
    """Run page blocks in one namespace, with /path/to/ files under tmp_path."""
    folder = tmp_path / "path" / "to"
    write(folder / "data.riegeli", 0, 40)
    for shard in range(3):
        write(folder / f"data-{shard:05d}.riegeli", 20 * shard, 20)
    write(folder / "train-00000.riegeli", 0, 30)
    write(folder / "train-00001.riegeli", 30, 40)
    prefix = str(tmp_path) + "/path/to/"
    namespace: dict = {}

    def run(block: str) -> dict:
        exec(compile(block.replace("/path/to/", prefix), "<seed 000>", "exec"), namespace)
        return namespace

    return run


def test_config_block(page):
    ns = page(CONFIG_BLOCK)
    c = ns["config"]
    assert (c.seed, c.num_epochs, c.shuffle_files) == (42, 10, True)


def test_creation_blocks_build_single_glob_and_list_sources(page):
    ns = page(CREATE_BLOCK)
    source = ns["source"]
    assert len(source) == 70 and source.config.num_epochs == 10
    assert [pathlib.Path(p).name for p in source.paths] == ["train-00000.riegeli", "train-00001.riegeli"]
    first = [int(r["data"][0]) for _, r in zip(range(3), source)]
    assert first == [0, 1, 2]


def test_pipeline_block_prints_each_batch_shape(page, capsys):
    import jax.numpy as jnp

    from datarax.operators.element import ElementOperator, ElementOperatorConfig

    ns = page(CREATE_BLOCK)
    ns["normalize_op"] = ElementOperator(
        ElementOperatorConfig(), fn=lambda e, key=None: e.update_data({"data": e.data["data"] / jnp.float32(70)})
    )
    capsys.readouterr()
    page(PIPELINE_BLOCK)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["Batch shape: (32, 3)", "Batch shape: (32, 3)", "Batch shape: (6, 3)"]
    np.testing.assert_allclose(np.asarray(ns["batch"]["data"])[:, 0], np.arange(64, 70) / 70, rtol=1e-6)


def test_checkpoint_block_restores_the_exact_position(page):
    ns = page(CREATE_BLOCK)
    source = ns["source"]
    head = [int(r["data"][0]) for _, r in zip(range(75), source)]  # into epoch 1
    ns = page(CHECKPOINT_BLOCK)
    state = ns["state"]
    assert (state["current_index"], state["current_epoch"]) == (5, 1)
    assert len(json.dumps(state)) < 300
    rest = [int(r["data"][0]) for _, r in zip(range(10), source)]
    assert head[-5:] == [0, 1, 2, 3, 4] and rest == list(range(5, 15))


def test_finite_epochs_block_runs_ten_epochs(page):
    ns = page(CREATE_BLOCK)
    ns["paths"] = ns["source"].paths
    ns["Pipeline"] = __import__("datarax.pipeline", fromlist=["Pipeline"]).Pipeline
    seen = []
    ns["train_step"] = lambda batch: seen.append(int(batch["data"].shape[0]))
    page(FINITE_EPOCHS_BLOCK)
    assert seen == [32, 32, 6] * 10
    assert ns["source"].get_state()["current_epoch"] == 10  # the ten passes ended


def test_step_block_stops_at_the_budget_across_epochs(page):
    ns = page(CREATE_BLOCK)
    ns["Pipeline"] = __import__("datarax.pipeline", fromlist=["Pipeline"]).Pipeline
    seen = []
    ns["train_step"] = lambda batch: seen.append(np.asarray(batch["data"])[:, 0].astype(int).tolist())
    ns["max_steps"] = 7
    page(STEP_BLOCK)
    assert ns["step"] == 7
    assert [len(b) for b in seen] == [32, 32, 6, 32, 32, 6, 32]
    assert sum(seen[:3], []) == list(range(70)) == sum(seen[3:6], [])


def test_shuffle_block_epochs_use_seed_plus_epoch(page):
    from datarax.sources import ArrayRecordSourceModule

    ns = page(CREATE_BLOCK)
    ns = page(SHUFFLE_BLOCK)
    paths = ns["source"].paths

    def orders(config, epochs):
        src = ArrayRecordSourceModule(config.replace(num_epochs=epochs), paths, decode=ns["decode"])
        flat = [int(r["data"][0]) for r in src]
        return [flat[i * 70:(i + 1) * 70] for i in range(epochs)]

    e = orders(ns["config"], 3)
    assert e[1] == orders(ns["config"].replace(seed=43), 1)[0]
    assert e[2] == orders(ns["config"].replace(seed=44), 1)[0]
    assert len({tuple(x) for x in e}) == 3 and all(sorted(x) == list(range(70)) for x in e)


def test_example_script_prints_the_page_summary():
    before = set(threading.enumerate())
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == EXPECTED_OUTPUT
    # a thread another test's garbage started meanwhile (an iterator collected off its
    # loop's thread releases on a thread of its own) ends by itself
    eventually(lambda: not threads_started_since(before))
    assert threads_started_since(before) == []


def test_example_notebook_is_in_sync_with_the_script():
    jupytext = pytest.importorskip("jupytext")
    script = jupytext.read(EXAMPLE)
    notebook = jupytext.read(EXAMPLE.with_suffix(".ipynb"))
    assert [(c.cell_type, c.source) for c in script.cells] == [
        (c.cell_type, c.source) for c in notebook.cells
    ]
