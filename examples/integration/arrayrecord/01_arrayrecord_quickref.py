# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # ArrayRecord Source Quick Reference
#
# `ArrayRecordSourceModule` reads Google's ArrayRecord files (random access, on host
# threads) and feeds a datarax `Pipeline`. This script writes its own small files, then
# walks through configuration, glob/list paths, pipeline integration, checkpointing,
# epochs and shuffling. Every step checks what it produced.
#
# Run it with `python examples/integration/arrayrecord/01_arrayrecord_quickref.py`.

# %%
import os
import shutil
import tempfile

import numpy as np
try:
    from array_record.python.array_record_module import ArrayRecordWriter
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[arrayrecord]"') from err
from flax import nnx

from datarax.operators.element import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

# %% [markdown]
# ## Write a few small ArrayRecord files
#
# Each record is 4 float32 values `[i, i, i, i]`, where `i` numbers the records across
# files. `group_size:1` is the layout random access wants.

# %%
workdir = tempfile.mkdtemp(prefix="datarax_arrayrecord_")


def write_records(path: str, start: int, count: int) -> str:
    writer = ArrayRecordWriter(path, "group_size:1")
    for i in range(start, start + count):
        writer.write(np.full(4, i, dtype=np.float32).tobytes())
    writer.close()
    return path


single_file = write_records(os.path.join(workdir, "data.riegeli"), 0, 100)
for shard in range(3):
    write_records(os.path.join(workdir, f"data-{shard:05d}.riegeli"), 40 * shard, 40)
paths = [
    write_records(os.path.join(workdir, "train-00000.riegeli"), 0, 50),
    write_records(os.path.join(workdir, "train-00001.riegeli"), 50, 50),
]


def decode(record: bytes) -> dict[str, np.ndarray]:
    # ArrayRecord records are bytes; turn one into a dict of arrays.
    return {"data": np.frombuffer(record, dtype=np.float32)}


# %% [markdown]
# ## Configuration and the three ways to name files

# %%
config = ArrayRecordSourceConfig(
    seed=42,
    num_epochs=10,  # Run for 10 epochs
    shuffle_files=True,  # Reshuffle record order each epoch
)

one = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=42), paths=single_file,
                              decode=decode, rngs=nnx.Rngs(0))
globbed = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=42, shuffle_files=True),
                                  paths=os.path.join(workdir, "data-*.riegeli"),
                                  decode=decode, rngs=nnx.Rngs(0))
listed = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=10), paths=paths,
                                 decode=decode, rngs=nnx.Rngs(0))
assert (len(one), len(globbed), len(listed)) == (100, 120, 100)
assert [os.path.basename(p) for p in globbed.paths] == [
    "data-00000.riegeli", "data-00001.riegeli", "data-00002.riegeli"]
assert one.element_spec()["data"].shape == (4,)

# %% [markdown]
# ## Pipeline integration
#
# Each `for batch in pipeline` is one pass (epoch) over the source.

# %%
def normalize(element, key=None):
    return element.update_data({"data": element.data["data"] / 100.0})


normalize_op = ElementOperator(ElementOperatorConfig(), fn=normalize)
pipeline = Pipeline(source=listed, stages=[normalize_op], batch_size=32, rngs=nnx.Rngs(0))
shapes = [tuple(batch["data"].shape) for batch in pipeline]
assert shapes == [(32, 4), (32, 4), (32, 4), (4, 4)]

# %% [markdown]
# ## Checkpointing
#
# `get_state()` is a few hundred bytes at any dataset size; `set_state()` on a freshly
# built source continues with exactly the next record.

# %%
source = ArrayRecordSourceModule(config, paths=paths, decode=decode, rngs=nnx.Rngs(0))
pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))
iterator = iter(pipeline)
seen = [np.asarray(next(iterator)["data"][:, 0]) for _ in range(2)]
state = source.get_state()  # the source's own position
pipeline_state = iterator.get_state()  # the pipeline's (includes the source's)
assert state["current_index"] == 64 and state["current_epoch"] == 0
assert state["shuffled_indices"] == {"seed": 42, "epoch": 0, "n": 100}
rest = [np.asarray(batch["data"][:, 0]) for batch in iterator]

# Resume a fresh pipeline: the next loop continues the saved epoch.
resumed = Pipeline(
    source=ArrayRecordSourceModule(config, paths=paths, decode=decode, rngs=nnx.Rngs(0)),
    stages=[], batch_size=32, rngs=nnx.Rngs(0))
resumed.set_state(pipeline_state)
again = [np.asarray(batch["data"][:, 0]) for batch in resumed]
assert len(rest) == len(again) and all(np.array_equal(a, b) for a, b in zip(rest, again))

# Resume a fresh source: direct iteration continues with the next record.
restored = ArrayRecordSourceModule(config, paths=paths, decode=decode, rngs=nnx.Rngs(0))
restored.set_state(state)
next_records = [float(record["data"][0]) for _, record in zip(range(36), restored)]
assert next_records == np.concatenate(rest).tolist()
epoch0 = np.concatenate(seen + rest).astype(int)
assert sorted(epoch0.tolist()) == list(range(100))  # every record once per epoch

# %% [markdown]
# ## Epochs
#
# A Pipeline runs one epoch per loop; `num_epochs` bounds direct iteration of the
# source (`-1` is unbounded).

# %%
epochs_seen = 0
for epoch in range(10):
    for batch in pipeline:
        pass
    epochs_seen += 1
assert epochs_seen == 10
direct = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=10), paths=paths,
                                 decode=decode, rngs=nnx.Rngs(0))
assert sum(1 for _ in direct) == 10 * 100

# %% [markdown]
# ## Shuffling
#
# Epoch `e` is a Feistel permutation keyed by `seed + e`: epoch 1 of seed 42 is epoch 0
# of seed 43.

# %%
def epoch_orders(seed: int, epochs: int) -> list[list[int]]:
    src = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(seed=seed, num_epochs=epochs, shuffle_files=True),
        paths=paths, decode=decode, rngs=nnx.Rngs(0))
    order = [int(record["data"][0]) for record in src]
    return [order[i * 100:(i + 1) * 100] for i in range(epochs)]


seed42 = epoch_orders(42, 2)
assert seed42[0] != seed42[1] and sorted(seed42[1]) == list(range(100))
assert epoch_orders(43, 1)[0] == seed42[1]
for src in (one, globbed, listed, source, restored, direct, resumed.source):
    src.close()
shutil.rmtree(workdir)

# %% [markdown]
# ## Summary

# %%
print("=" * 60)
print("ArrayRecord Source Quick Reference")
print("=" * 60)
print()
print("This quick reference demonstrates the ArrayRecordSourceModule API.")
print("It reads ArrayRecord files it wrote itself (any file name works).")
print()
print("Key API Summary:")
print()
print("  1. Configuration:")
print("     config = ArrayRecordSourceConfig(")
print("         seed=42,")
print("         num_epochs=-1,")
print("         shuffle_files=True,")
print("     )")
print()
print("  2. Source Creation:")
print("     source = ArrayRecordSourceModule(")
print("         config,")
print('         paths="/path/to/*.array_record",')
print("         decode=decode,")
print("         rngs=nnx.Rngs(0),")
print("     )")
print()
print("  3. Pipeline Integration:")
print("     pipeline = Pipeline(source=source, stages=[], batch_size=32, rngs=nnx.Rngs(0))")
print()
print("  4. Checkpointing:")
print("     state = source.get_state()")
print("     source.set_state(state)")
print()
print("=" * 60)
print("Quick reference completed!")
print("=" * 60)
