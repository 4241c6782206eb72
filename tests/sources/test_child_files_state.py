"""A state restored into a source built from ArrayRecord sources (ConcatSource,
MixSource, InterleaveSource, ShuffleBufferSource, FlatMapSource) whose children now read
other files, or the same files in another order, is refused by every route, as a lone
ArrayRecord source's is: each child's ``files`` digest is one of its order settings, so
it is in the combined source's too. The same files in another folder restore.

Before, each of these restored silently and served other records.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("array_record.python.array_record_module")

from int_record_files import int32, int_source, write_int_parts, write_parts  # noqa: E402

from datarax.core.errors import StateError  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import (  # noqa: E402
    ConcatSource,
    FlatMapSource,
    InterleaveSource,
    MixSource,
    ShuffleBufferSource,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two files of 6 records (0-5, 6-11); two other files of the same counts (100-111);
    a copy of the first two in another folder."""
    paths = write_int_parts(tmp_path_factory.mktemp("parts"), [6, 12])
    other = write_parts(tmp_path_factory.mktemp("other"), [range(100, 106), range(106, 112)],
                        int32, name="other-{}.array_record")
    moved = tmp_path_factory.mktemp("moved")
    return {"same": paths, "swapped": paths[::-1], "other": other,
            "moved": [shutil.copy(p, moved) for p in paths]}


def combined(kind, paths):
    a, b = int_source(paths[:1]), int_source(paths[1:])
    if kind == "concat":
        source = ConcatSource([a, b])
    elif kind == "mix":
        source = MixSource({"a": a, "b": b}, weights={"a": 1, "b": 1}, seed=0)
    elif kind == "interleave":
        source = InterleaveSource([a, b], cycle_length=2)
    elif kind == "shuffle_buffer":
        source = ShuffleBufferSource(int_source(paths), buffer_size=4, seed=1)
    else:
        source = FlatMapSource(int_source(paths), lambda r: [r, r], max_outputs=2)
    return Pipeline(source=source, stages=[], batch_size=4)


KINDS = ["concat", "mix", "interleave", "shuffle_buffer", "flat_map"]


@pytest.fixture(scope="module")
def saved(files):
    """Per kind: its JSON state and nnx state one batch in, and the batches left; under
    ``(kind, "source")`` its source's own state then."""
    out = {}
    for kind in KINDS:
        first = combined(kind, files["same"])
        iterator = iter(first)
        next(iterator)
        states = json.loads(json.dumps(first.get_state())), jax.tree.map(np.array,
                                                                         nnx.state(first))
        out[kind] = states, [b["x"].tolist() for b in iterator]
        out[kind, "source"] = json.loads(json.dumps(first.source.get_state()))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_over_other_files_of_the_same_counts_is_refused(files, saved, kind):
    (state, nnx_state), _ = saved[kind]
    again = combined(kind, files["other"])
    with pytest.raises(StateError, match=r"saved with source\.\w+(\[0\])?\.files='[0-9a-f]+' "
                                         r".* reads other files") as err:
        again.set_state(state)
    assert err.value.field.endswith(".files")
    with pytest.raises(StateError, match=r"source has \w+(\[0\])?\.files='[0-9a-f]+'"):
        combined(kind, files["other"]).source.set_state(saved[kind, "source"])
    again = combined(kind, files["other"])
    nnx.update(again, nnx_state)
    with pytest.raises(StateError, match=r"position restored .* other settings: .*files="):
        next(iter(again))


@pytest.mark.parametrize("kind", ["concat", "mix"])
def test_a_state_over_the_children_s_files_swapped_is_refused(files, saved, kind):
    (state, nnx_state), _ = saved[kind]
    with pytest.raises(StateError, match=r"parts\[0\]\.files|children\[0\]\.files"):
        combined(kind, files["swapped"]).set_state(state)
    again = combined(kind, files["swapped"])
    nnx.update(again, nnx_state)
    with pytest.raises(StateError, match=r"position restored .*files="):
        next(iter(again))


@pytest.mark.parametrize("kind", ["concat", "shuffle_buffer"])
def test_the_same_files_in_another_folder_restore(files, saved, kind):
    (state, nnx_state), rest = saved[kind]
    again = combined(kind, files["moved"])
    again.set_state(state)
    assert [b["x"].tolist() for b in again] == rest
    again = combined(kind, files["moved"])
    nnx.update(again, nnx_state)
    assert [b["x"].tolist() for b in again] == rest


def test_a_state_saved_before_children_had_files_restores_as_before(files, saved):
    # datarax before this saved no "files" among a combined source's settings
    (state, _), rest = saved["mix"]
    earlier = {**state, "settings": {k: v for k, v in state["settings"].items()
                                     if not k.endswith(".files")}}
    again = combined("mix", files["same"])
    again.set_state(earlier)
    assert [b["x"].tolist() for b in again] == rest


def test_an_nnx_state_saved_before_children_had_files_restores_as_before(files):
    # datarax before this digested a combined source's settings without its children's files
    from datarax.core.position import settings_digest

    first = combined("concat", files["same"])
    iterator = iter(first)
    next(iterator)
    saved = jax.tree.map(np.array, nnx.state(first))
    rest = [b["x"].tolist() for b in iterator]
    earlier = {"class": "ConcatSource", **{k: v for k, v in first.source.order_settings().items()
                                           if not k.endswith(".files")},
               "shard": "0 of 1", "records": 12}
    saved["source"]["datarax_position"]["settings_var"].set_value(settings_digest(earlier))
    again = combined("concat", files["same"])
    nnx.update(again, saved)
    assert [b["x"].tolist() for b in again] == rest
