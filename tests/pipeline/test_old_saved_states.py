"""States saved by earlier datarax releases, restored by this one (issue 42's promise).

``tests/data/saved_states/*.json`` were written from the pipelines of
``tests/saved_state_builders.py`` by earlier commits (``v2_*``: 51d4510f, ``v3_*``:
741c25fb, ``v4_*``: 4bab7747, ``v4_flat_map``: e7ebed6b, before a flat map's state
named its ``fn_source``), each the state after 3 batches and the 2 batches served
next: a state of the current version restores to exactly those batches; a pipeline state
of version 2 or 3 (and a ``take`` state around one) is refused naming its version; a
source's own state of version 2 still restores.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from flax import nnx
from saved_state_builders import BUILDERS, leaves_from_json, values

from datarax.core.errors import StateError

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "saved_states"


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _restore(record: dict) -> list:
    built = BUILDERS[record["builder"]]()
    if record["route"] == "source":
        built.source.set_state(record["state"])
        iterator = iter(built)
    elif record["route"] == "nnx":
        state = nnx.state(built)
        nnx.replace_by_pure_dict(state, leaves_from_json(record["state"]))
        nnx.update(built, state)
        iterator = iter(built)
    else:
        iterator = iter(built)
        iterator.set_state(record["state"])
    return [values(next(iterator)) for _ in range(len(record["next"]))]


CURRENT = sorted(p.name for p in DATA.glob("v4_*.json"))


@pytest.mark.parametrize("name", CURRENT)
def test_a_state_of_the_current_version_saved_by_an_earlier_release_continues_its_batches(name):
    record = _load(name)
    assert _restore(record) == record["next"]


def test_the_saved_current_version_states_cover_every_builder():
    assert sorted(_load(name)["builder"] for name in CURRENT) == sorted(BUILDERS)


def test_a_source_state_of_version_2_restores_into_todays_source():
    record = _load("v2_source_shuffled_with_stages.json")
    assert _restore(record) == record["next"]


def test_an_nnx_state_of_a_flat_map_saved_before_its_cursor_counted_skips_restores():
    # 51d4510f: a 4-long cursor and a settings digest without fn_source (was a
    # ValueError unpacking the cursor, and before that a StateError naming fn_source)
    record = _load("v2_nnx_flat_map.json")
    assert len(record["state"]["source"]["cursor"]["value"]) == 4
    assert _restore(record) == record["next"]


@pytest.mark.parametrize("name, version", [("v2_shuffled_with_stages.json", 2),
                                           ("v3_filtered.json", 3)])
def test_a_pipeline_state_of_an_earlier_version_is_refused_naming_it(name, version):
    with pytest.raises(StateError, match=f"state version {version} is not 4.*release that "
                                         "saved it"):
        _restore(_load(name))


def test_a_take_state_around_a_version_2_pipeline_state_is_refused_naming_it():
    with pytest.raises(StateError, match="earlier datarax release's .*of version 2"):
        _restore(_load("v2_taken.json"))
