"""A ``for`` loop after ``step()`` / ``scan()`` (docs/reliability.md, Epoch ends):
``step()`` serves from the live pass like ``next()``, so the loop starts the next
epoch, as after a ``break``; the state taken after the steps still serves the rest of
the stepped epoch. After ``scan()`` the loop serves the rest of the scanned epoch."""

from __future__ import annotations

import numpy as np

from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def build() -> Pipeline:
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    return Pipeline(source=source, stages=[], batch_size=2)


def xs(batches) -> list[list[int]]:
    return [np.asarray(b["x"]).tolist() for b in batches]


def test_a_loop_after_step_starts_the_next_epoch_and_the_state_serves_the_rest():
    pipeline = build()
    assert xs([pipeline.step(), pipeline.step()]) == [[0, 1], [2, 3]]
    state = pipeline.get_state()
    assert (state["epoch"], state["position"]) == (0, 4)
    assert xs(pipeline) == [[0, 1], [2, 3], [4, 5]] and pipeline.epoch == 2
    restored = build()
    restored.set_state(state)
    assert xs(restored) == [[4, 5]]


def test_a_loop_after_scan_serves_the_rest_of_the_scanned_epoch():
    pipeline = build()
    out = pipeline.scan(lambda batch: batch["x"], 2)
    assert np.asarray(out).tolist() == [[0, 1], [2, 3]]
    assert xs(pipeline) == [[4, 5]] and pipeline.epoch == 1


def test_scan_refuses_a_source_with_text_fields_and_moves_nothing():
    """A text field stays on the host: a scanned batch would lack it, so scan refuses."""
    import pytest
    from datarax.core.errors import ConfigError

    data = {"x": np.arange(6, dtype=np.int32), "words": np.array([f"w{i}" for i in range(6)])}
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), data), batch_size=2)
    with pytest.raises(ConfigError, match=r"MemorySource's text field\(s\) \['words'\] stay "
                                          r"on the host"):
        pipeline.scan(lambda batch: batch["x"], 2)
    assert (pipeline.epoch, pipeline.position) == (0, 0)
    assert [sorted(b) for b in pipeline] == [["words", "x"]] * 3
