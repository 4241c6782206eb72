"""A state names the files it was saved over: restored over other files, or the same
files listed in another order, it is refused by every route (its positions would name
other records); the same files moved to another folder restore.

Before, a list given in another order (``paths=[b, a]`` for ``[a, b]``), or other files
of the same record counts, restored silently and served other records.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("array_record.python.array_record_module")

from int_record_files import int_source, write_int_parts  # noqa: E402

from datarax.core.errors import StateError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two files of 6 records each (0-5, 6-11), and a copy of both in another folder."""
    folder = tmp_path_factory.mktemp("parts")
    paths = write_int_parts(folder, [6, 12])
    moved = tmp_path_factory.mktemp("moved")
    return paths, [shutil.copy(p, moved) for p in paths]


def pipeline(paths, **settings):
    return Pipeline(source=int_source(paths, **settings), stages=[], batch_size=4)


def saved(paths, **settings):
    """A pipeline one batch in, its JSON state, its nnx state and the batches left."""
    first = pipeline(paths, **settings)
    iterator = iter(first)
    next(iterator)
    states = (json.loads(json.dumps(first.get_state())),
              jax.tree.map(np.array, nnx.state(first)), first.source.get_state())
    rest = [b["x"].tolist() for b in iterator]
    first.source.close()
    return states, rest


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_state_over_files_in_another_order_is_refused_by_every_route(files, shuffle):
    paths, _ = files
    (state, nnx_state, source_state), _ = saved(paths, shuffle_files=shuffle)
    assert source_state["files"] == state["source"]["files"]
    swapped = pipeline(paths[::-1], shuffle_files=shuffle)
    with pytest.raises(StateError, match=r"saved with source.files='[0-9a-f]+' .* the same "
                                         r"files in another order") as err:
        swapped.set_state(state)
    assert err.value.field == "source.files"
    with pytest.raises(StateError, match=r"saved over other files .* \['part-1.array_record', "
                                         r"'part-0.array_record'\]"):
        swapped.source.set_state(source_state)
    nnx.update(swapped, nnx_state)
    with pytest.raises(StateError, match=r"other settings: files='[0-9a-f]+' differs"):
        next(iter(swapped))
    swapped.source.close()


def test_the_same_files_in_another_folder_restore(files):
    paths, moved = files
    (state, nnx_state, source_state), rest = saved(paths, shuffle_files=True, seed=3)
    for how in ("pipeline", "nnx", "source"):
        again = pipeline(moved, shuffle_files=True, seed=3)
        if how == "pipeline":
            again.set_state(state)
        elif how == "nnx":
            nnx.update(again, nnx_state)
        else:
            again.source.set_state(source_state)
        assert [b["x"].tolist() for b in again] == rest, how
        again.source.close()


def test_a_state_without_files_restores_as_before(files):
    # a state saved by datarax before the entry: its position and settings as they are
    paths, _ = files
    (state, _, source_state), rest = saved(paths)
    del state["source"]["files"], source_state["files"]
    del state["settings"]["source.files"], source_state["settings"]["files"]
    for restore in ("pipeline", "source"):
        again = pipeline(paths)
        if restore == "pipeline":
            again.set_state(state)
        else:
            again.source.set_state(source_state)
        assert [b["x"].tolist() for b in again] == rest
        again.source.close()
